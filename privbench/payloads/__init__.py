"""Wire messages (payloads), the run's payload store and the capture policy."""
from privbench.payloads.capture import CapturePolicy
from privbench.payloads.payload import KINDS, Payload, tensor_bytes
from privbench.payloads.store import PayloadStore

__all__ = ["KINDS", "CapturePolicy", "Payload", "PayloadStore", "tensor_bytes"]
