"""Stage 3, the model: reading every model format, with the checks that come before anything runs.

`safety` (the op allowlist and what a fetch would run), `import_check` (the serialized
graph checked before it is imported), `inline` (a TF2 SavedModel's signature functions
inlined), `keras_files` (Keras files checked as data), `keras` (Keras files loaded, and the
`KerasModel` they give), `model` (`load_model`: whichever format of `formats` reads the path,
each in a module of its own with a `read` hook: `checkpoint`, `saved_model`, `frozen`,
`keras`, `tflite` (TensorFlow Lite files, checked as data in `tflite_check`, and the
`LiteModel` they give); the `Model` they give in `loaded`, path rules in `paths`, graphs
rebuilt in `rebuild`).
May import `tracer.inputs`, `tracer.cells` and `tracer._tf`.
"""
