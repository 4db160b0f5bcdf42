"""The model: Decomposable Attention (decomposable), its pluggable aligners (aligners, and the attention design
space in attention), the layers they share, the embedders that turn a pair's words into vectors (static tables in
embeddings and vector_files, a frozen or fine-tuned encoder in contextual), the arithmetic (precision) and the one
function that assembles a trained model from its saved parts (assembly). Nothing here imports Lightning."""
