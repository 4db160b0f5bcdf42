"""The saved forms of a trained model, each one's writer beside its reader: a run folder (run_folder, provenance,
examples, run_names), a shared model folder (shared_folder writes, shared_reading reads, never a pickle), the
exported files other runtimes load (formats) and the serving.json that describes them (onnx_folder), and configs
saved by earlier versions (earlier_versions). Nothing here imports Lightning."""

#: Every saved form a trained model is loaded from, as a message that sends a user to one names them (the loader's
#: and the run folder's errors say the same list).
SAVED_FORMS = (
    "a run directory (outputs/runs/<task>/<aligner>/<time>), its checkpoints/ folder, a checkpoint file, a folder "
    "written by matching-export format=hub or format=onnx, or a hub repository id owner/name"
)
