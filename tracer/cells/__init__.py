"""Stage 1, the cell model every stage passes along: what a cell is, what a finder returns, its numpy math.

`kinds` (one `CellSpec` per cell class: gate order, weight blocks, states), `found` (`Cell`,
`Step`, `Loop`, `Fused`, `KerasCell`, `LiteCell`: the dataclasses every finder returns, below all of
them), `reference` (a cell's step in float64 numpy, for checks). Imports only `tracer._tf`.
"""
