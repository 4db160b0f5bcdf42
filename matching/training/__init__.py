"""Training: one run (run), its parts built from the config (build: the data module, the LightningModule), the
LightningModule itself (system), its losses and metrics, callbacks, the data module and what a positives-only task
mines (datamodule, negatives), evaluating a trained run on a split (evaluation), distillation's teachers and sweeps
that survive an interruption."""
