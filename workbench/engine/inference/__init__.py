"""A loaded model version (Triton's ``Model``) and its request path: tensor specs, request
validation, the classification extension, the response cache."""
