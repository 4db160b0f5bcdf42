"""The HTTP server over a trained model: its endpoints (http), the in-process micro-batcher (batcher), the process
supervisor (server), the Ray Serve deployment (ray_serve) and the page."""
