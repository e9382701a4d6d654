"""Stage 1, what is recorded: cell specs, what a finder returns, the numpy math of a cell.

`cells` (one `CellSpec` per cell class: gate order, weight blocks, states), `found` (`Cell`,
`Step`, `Loop`, `Fused`, `KerasCell`: the dataclasses every finder returns, below all of
them), `reference` (a cell's step in float64 numpy, for checks). Imports only `tracer._tf`.
"""
