"""``tokenizer``: BYTES sentences -> all-MiniLM-L6-v2 token ids, as sentence-transformers makes them.

Input ``TEXT`` BYTES [batch, 1] (UTF-8, at most 1 MiB per element). Outputs ``input_ids``, ``attention_mask``,
``token_type_ids`` INT64 [batch, seq]: [CLS] ... [SEP], truncated at 256 word pieces, padded with
[PAD] (id 0, mask 0) to the longest sentence of the whole execution, i.e. of every request that
``execute`` receives at once. Each response holds its own request's rows at that common length.

Mean pooling with the attention mask makes the padding irrelevant to the embeddings; equal lengths
let the encoder's dynamic batcher run the requests of one tokenizer execution together.
"""

import json
from pathlib import Path

import triton_python_backend_utils as pb_utils

# Copied next to this file by sample_models/build.py (source: sample_models/python_models/_shared).
from minilm_tokenization import (
    OUTPUT_NAMES,
    BatchTokenizer,
    TextTooLong,
    check_text_sizes,
    decode_texts,
    files_dir,
)


class TritonPythonModel:
    """Tokenizes every request of an execution as one padded batch."""

    def initialize(self, args):
        """Load ``tokenizer.json`` and ``sentence_bert_config.json`` from the version folder."""
        self.model_config = json.loads(args["model_config"])
        self.tokenizer = BatchTokenizer(files_dir(args, Path(__file__).parent))

    def execute(self, requests):
        """One response per request, in order; a request whose TEXT is not UTF-8, or has an
        element over ``MAX_TEXT_BYTES`` (1 MiB), gets an INVALID_ARG error response."""
        texts, failed = [], {}
        for i, request in enumerate(requests):
            try:
                values = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy()
                check_text_sizes(values)
                texts.append(decode_texts(values))
            except UnicodeDecodeError as exc:
                failed[i] = pb_utils.TritonError(f"TEXT must be UTF-8: {exc}", pb_utils.TritonError.INVALID_ARG)
                texts.append([])
            except TextTooLong as exc:
                failed[i] = pb_utils.TritonError(str(exc), pb_utils.TritonError.INVALID_ARG)
                texts.append([])
        encoded = self.tokenizer.encode_requests(texts)
        responses = []
        for i, rows in enumerate(encoded):
            if i in failed:
                responses.append(pb_utils.InferenceResponse(output_tensors=[], error=failed[i]))
            else:
                tensors = [pb_utils.Tensor(name, rows[name]) for name in OUTPUT_NAMES]
                responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
        return responses

    def finalize(self):
        """Nothing to release."""
