"""The saved forms of a trained model, each one's writer beside its reader: a run folder (run_folder, provenance,
examples, run_names), a shared model folder (shared_folder writes, shared_reading reads, never a pickle), the
exported files other runtimes load (formats) and the serving.json that describes them (onnx_folder), and configs
saved by earlier versions (earlier_versions). Nothing here imports Lightning."""
