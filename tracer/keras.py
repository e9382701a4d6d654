"""`tracer.keras.GateLogger`: the Keras callback that logs gates while a model trains
(`tracer.run.training`), for Keras 3 and tf-keras alike."""

from tracer.run.training import GateLogger

__all__ = ["GateLogger"]
