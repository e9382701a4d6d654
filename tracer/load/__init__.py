"""Stage 3, the model: reading every model format, with the checks that come before anything runs.

`safety` (the op allowlist and what a fetch would run), `import_check` (the serialized
graph checked before it is imported), `inline` (a TF2 SavedModel's signature functions
inlined), `keras_files` (Keras files checked as data), `keras` (Keras files loaded, and the
`KerasModel` they give), `model` (`load_model`: checkpoints, SavedModels, frozen graphs; the
`Model` they give in `loaded`, SavedModels in `saved_model`, path rules in `paths`, graphs
rebuilt in `rebuild`, the formats' names in `formats`).
May import `tracer.inputs`, `tracer.cells` and `tracer._tf`.
"""
