"""Wire messages (payloads), their kinds, the run's payload store and the capture policy."""
from privbench.payloads.capture import CapturePolicy
from privbench.payloads.kinds import KINDS, PayloadKind, kind, kinds_where
from privbench.payloads.payload import PHASES, Payload, tensor_bytes
from privbench.payloads.store import PayloadStore
from privbench.payloads.training import AggregatePart, Condensation, LocalTraining

__all__ = ["KINDS", "PHASES", "AggregatePart", "CapturePolicy", "Condensation", "LocalTraining", "Payload",
           "PayloadKind", "PayloadStore", "kind", "kinds_where", "tensor_bytes"]
