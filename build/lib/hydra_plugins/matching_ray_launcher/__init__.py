"""`hydra/launcher=ray`: matching's Hydra launcher over Ray's own task API (see ray_launcher.py)."""
