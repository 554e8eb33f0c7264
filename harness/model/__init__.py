"""The network math: ops, the FP32 reference forward, the embedded model's prompt encoder and decoder."""
