"""Stage 5, the values: every gate, state and weight of the cells found, from one run per batch.

`plan` (`ValuePlan`: what every plan offers), `running` (a `Session.run` that Ctrl-C and a
time limit can stop), `replay` (a loop's cell recomputed in numpy and checked against the
loop's outputs), `conv` (a ConvLSTM's), `fused` (a fused op's values), `weights` (per-gate
W, U, b), `fetch` (`FetchPlan`: the one-run fetch of a graph; `slots` where its values sit),
`keras` (`KerasPlan`: a Keras model's layers captured in one call and replayed), `lite`
(`LitePlan`: a TensorFlow Lite file's ops captured by its interpreter; `replayed`, what both
hand out), `trace` (a
batch's values as arrays), `summaries` (a batch's statistics), `emit` (loops rewritten to
emit their cells' values), `parts` (what drives a gate). May import
`tracer.find`, `tracer.load`, `tracer.inputs`, `tracer.cells` and `tracer._tf`.
"""
