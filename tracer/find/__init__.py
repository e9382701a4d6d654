"""Stage 4, the cells: finding every RNN cell of a graph or a Keras model by following edges.

`edges` (the edge helpers the finders share), `application` (one step as a pattern finds
it), `tf_cells` and `keras_cells` (the step patterns of each cell family, every era side by
side), `steps` (all patterns over a graph), `unrolled` (chains of steps outside loops),
`loops` (cells inside while loops), `fused` (fused RNN ops), `keras` (a Keras model's RNN
layers), `lite` and `lite_loops` (a TensorFlow Lite file's fused ops and WHILE loops),
`graph` (`find_cells`: the finders side by side). May import `tracer.load`,
`tracer.inputs`, `tracer.cells` and `tracer._tf`.
"""
