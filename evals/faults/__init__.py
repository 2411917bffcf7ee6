"""Stage 2, faults: the fault plan (which fault at which call site), adversarial replies, and the wrappers that inject them."""
