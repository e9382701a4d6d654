"""Reading a recording: `reader` (`Recording`: selections as frames, arrays and blocks, every
file checked first), `frames` (a trace's gates as one long frame), `analysis` (saturation,
step statistics, top positions, what drives a gate), `plots` (matplotlib figures of those).

Imports `recorders.errors`, this package, and the format of `recorders.write` (`layout`,
`columns`, `keys`, `schema`, `progress`, `folder`), never the writer's own parts.
"""
