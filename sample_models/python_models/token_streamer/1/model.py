"""``token_streamer``: a decoupled model that streams the all-MiniLM-L6-v2 word pieces of a text.

For a request with ``TEXT`` BYTES [1] it sends, through the request's response sender, one
response per word piece (``TOKEN`` BYTES [1], ``INDEX`` INT32 [1], counting from 0; no [CLS] /
[SEP], no truncation), then a response with no outputs and the flag
``TRITONSERVER_RESPONSE_COMPLETE_FINAL``. ``execute`` returns None, as decoupled models must.
A ``TEXT`` over ``MAX_STREAM_TEXT_BYTES`` (64 KiB: about 16k responses) gets one INVALID_ARG
error response instead, before anything is tokenized.
"""

import json
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils

# Copied next to this file by sample_models/build.py (source: sample_models/python_models/_shared).
from minilm_tokenization import (
    TextTooLong,
    as_bytes_array,
    check_text_sizes,
    decode_texts,
    files_dir,
    load_tokenizer,
    word_pieces,
)

#: the largest TEXT streamed, bytes (each word piece is one response)
MAX_STREAM_TEXT_BYTES = 64 * 1024


class TritonPythonModel:
    """Sends the responses from execute() itself: word pieces are cheap to compute."""

    def initialize(self, args):
        """Check the decoupled policy and load ``tokenizer.json`` from the version folder."""
        self.model_config = json.loads(args["model_config"])
        if not pb_utils.using_decoupled_model_transaction_policy(self.model_config):
            raise pb_utils.TritonModelException(
                f"{args['model_name']} sends one response per token: set model_transaction_policy {{ decoupled: true }}"
            )
        self.tokenizer = load_tokenizer(files_dir(args, Path(__file__).parent))

    def execute(self, requests):
        """Stream each request's word pieces, then close its stream with the final flag."""
        for request in requests:
            sender = request.get_response_sender()
            try:
                values = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy()
                check_text_sizes(values, MAX_STREAM_TEXT_BYTES, note=" (one response per word piece)")
                texts = decode_texts(values)
            except (UnicodeDecodeError, TextTooLong) as exc:
                reason = f"TEXT must be UTF-8: {exc}" if isinstance(exc, UnicodeDecodeError) else str(exc)
                error = pb_utils.TritonError(reason, pb_utils.TritonError.INVALID_ARG)
                sender.send(pb_utils.InferenceResponse(error=error),
                            flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                continue
            pieces = [piece for text in texts for piece in word_pieces(self.tokenizer, text)]
            for index, piece in enumerate(pieces):
                outputs = [
                    pb_utils.Tensor("TOKEN", as_bytes_array([piece])),
                    pb_utils.Tensor("INDEX", np.array([index], dtype=np.int32)),
                ]
                sender.send(pb_utils.InferenceResponse(output_tensors=outputs))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
