"""Built-in ops: one module per op, each in the same order (reference, kernels, launchers, impls)."""

BUILTIN_OPS: dict[str, str] = {
    "square": "kernelkit.ops.square",
}
