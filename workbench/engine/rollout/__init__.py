"""Rollouts (a product extension, Triton has none): the weighted split, the mirror and its agreement,
promote and roll back."""
