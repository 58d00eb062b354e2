"""The request and response types every layer passes (``InferRequest``, ``InferResponse``, ``Tensor``)
and the tensor codecs of the wire formats."""
