"""Serving a trained model: the files other runtimes load (formats), the description of them (spec), the shared
model folder (sharing), and the HTTP server's batcher, endpoints (http) and page."""
