"""Each study's published rendering, beside the study: the renderers of the README's and docs' `<!-- results:... -->`
blocks that quote it. A study's spec (conf/study/<name>.yaml) names its renderers under `published`, and the figures
measured elsewhere name theirs in docs/figures/measured_elsewhere.yaml; `python -m matching.results.publish render`
reads those declarations and calls each renderer with the folder of its data (matching.results.publish)."""
