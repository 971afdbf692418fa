"""tools/probe.py's sweep of the public Python API (issue 36): each public function of tensor,
autograd, layer (constructors and forward), opt, schedule, clip, initializer and io called with
healthy arguments, and again with one argument replaced by each bad value of its kind ('x',
None, NaN, inf, 2**70, [], 1.5, ...). The healthy call must run (`ok`); every bad one must raise
a loom.Error (`typed`): Python's own TypeError, ValueError, AttributeError, OverflowError or
IndexError is `untyped`, an accepted value `silent`.

A row is (callee, [(argument, healthy value, kind)]): the callee is a function, or an expression
that makes the callable (a layer, for its forward); arguments are passed by position in the
order given, each as code. The kind names the bad values (KINDS); a trailing '?' means None is a
healthy value of that argument (its default) and is not tried.
"""

# The bad values of each kind of argument, as code.
KINDS = {
    "T": ["'x'", "None", "[]", "1.5"],                              # a Tensor
    "TN": ["'x'", "None", "[]"],                                    # a Tensor or a number
    "F": ["'x'", "None", "[]"],                                     # a number (NaN and inf are values)
    "FF": ["'x'", "None", "[]", "math.nan", "math.inf"],            # a finite number
    "FN": ["'x'", "None", "[]", "math.nan"],                        # a number, not NaN (inf is a bound)
    "I": ["'x'", "None", "1.5", "math.nan", "[]", "2 ** 70"],       # an int (an axis: 2**70 is out of range)
    "I0": ["'x'", "None", "1.5", "math.nan", "[]", "-1"],            # a count (0 allowed)
    "I1": ["'x'", "None", "1.5", "math.nan", "[]", "2 ** 70", "0", "-1"],  # a positive int (a size)
    "S": ["'x'", "None", "1.5", "[1.5]", "['x']", "[2 ** 70]"],     # a sequence of ints (a shape, axes)
    "Sc": ["'x'", "None", "1.5", "[1.5]", "['x']"],                 # ints clamped as Python's slices are
    "SI": ["'x'", "None", "1.5", "[1.5]", "['x']", "math.nan"],     # an int or a sequence of ints
    "TL": ["'x'", "None", "1.5", "[None]", "['x']"],                # a list of Tensors
    "N": ["'x'", "None", "1.5", "[]"],                              # a name (a dtype, a mode)
    "O": ["'x'", "None", "1.5", "[]"],                              # an object of loom's (an optimizer, a device)
    "A": ["'x'", "None", "[]"],                                     # an array or a Tensor
    "PAIR": ["'x'", "None", "1.5", "['a', 'b']", "[1.0, None]"],   # a pair of numbers
    "PATH": ["None", "1.5", "[]"],                                  # a path
    "DICT": ["'x'", "None", "1.5", "{'w': None}", "{'w': 'x'}"],    # {name: Tensor}
    "B": ["'x'", "None", "1.5", "[]"],                              # bytes
    "BOOL": [],                                                     # read by truth value, as Python's own
}

X = "X()"  # a (2, 3) float32 tensor of 0.5s (PRELUDE)
UNARY = ("relu", "sigmoid", "tanh", "exp", "log", "sqrt", "abs", "erf", "sign", "ceil", "floor", "round", "sin",
         "cos", "atan", "sinh", "negative", "reciprocal", "softsign", "softplus", "identity", "square", "gelu")

ROWS = [
    # ---- loom.tensor ----
    ("tensor.full", [("shape", "(2, 3)", "S"), ("value", "1.5", "F")]),
    ("tensor.zeros", [("shape", "(2, 3)", "S")]),
    ("tensor.ones", [("shape", "(2, 3)", "S"), ("device", "dev", "N?"), ("dtype", "'float32'", "N?")]),
    ("tensor.gaussian", [("shape", "(2, 3)", "S"), ("mean", "0.0", "FF"), ("std", "1.0", "FF")]),
    ("tensor.uniform", [("shape", "(2, 3)", "S"), ("low", "0.0", "FF"), ("high", "1.0", "FF")]),
    ("tensor.bernoulli", [("p", "0.5", "FF"), ("t", X, "T")]),
    ("tensor.zeros_like", [("t", X, "T")]),
    ("tensor.sum", [("t", X, "T"), ("axis", "0", "SI?")]),
    ("tensor.average", [("t", X, "T"), ("axis", "1", "SI?")]),
    ("tensor.transpose", [("t", X, "T"), ("axes", "(1, 0)", "S?")]),
    ("tensor.reshape", [("t", X, "T"), ("shape", "(3, 2)", "S")]),
    ("tensor.repeat", [("t", X, "T"), ("repeats", "2", "SI"), ("axis", "0", "I?")]),
    ("tensor.lt", [("t", X, "T"), ("x", "0.5", "TN")]),
    ("tensor.ge", [("t", X, "T"), ("x", "0.5", "TN")]),
    ("tensor.eq", [("t", X, "T"), ("x", "0.5", "TN")]),
    ("tensor.tensordot", [("a", X, "T"), ("b", "X(3, 2)", "T"), ("axes", "1", "I")]),
    ("tensor.to_numpy", [("t", X, "T")]),
    ("tensor.is_host_viewable", [("t", X, "T")]),
    ("tensor.concatenate", [("tensors", "[X(), X()]", "TL"), ("axis", "0", "I")]),
    ("tensor.copy_data_to_from", [("dst", X, "T"), ("src", X, "T"), ("size", "2", "I"), ("dst_offset", "0", "I"),
                                  ("src_offset", "0", "I")]),
    ("tensor.axpy", [("alpha", "2.0", "F"), ("x", X, "T"), ("y", X, "T")]),
    ("tensor.pow", [("t", X, "T"), ("x", "2.0", "TN")]),
    ("tensor.mult", [("A", X, "T"), ("B", "X(3, 2)", "T"), ("C", "X(2, 2)", "T?"), ("alpha", "1.0", "F"),
                     ("beta", "1.0", "F")]),
    ("tensor.add_column", [("alpha", "1.0", "F"), ("v", "X(2)", "T"), ("beta", "1.0", "F"), ("M", X, "T")]),
    ("tensor.add_row", [("alpha", "1.0", "F"), ("v", "X(3)", "T"), ("beta", "1.0", "F"), ("M", X, "T")]),
    ("tensor.from_raw_tensors", [("tensors", "[X()]", "TL")]),
    ("tensor.exp", [("t", X, "T")]),
    # ---- loom.autograd ----
    *[(f"autograd.{name}", [("x", X, "T")]) for name in UNARY],
    ("autograd.add", [("a", X, "TN"), ("b", X, "TN")]),
    ("autograd.mul", [("a", X, "TN"), ("b", "2.0", "TN")]),
    ("autograd.matmul", [("a", X, "T"), ("b", "X(3, 2)", "T")]),
    ("autograd.softmax", [("x", X, "T"), ("axis", "-1", "I")]),
    ("autograd.leakyrelu", [("x", X, "T"), ("a", "0.1", "FF")]),
    ("autograd.elu", [("x", X, "T"), ("alpha", "1.0", "FF")]),
    ("autograd.selu", [("x", X, "T"), ("alpha", "1.5", "FF"), ("gamma", "1.0", "FF")]),
    ("autograd.hardsigmoid", [("x", X, "T"), ("alpha", "0.2", "FF"), ("gamma", "0.5", "FF")]),
    ("autograd.clip", [("x", X, "T"), ("min", "0.0", "FN?"), ("max", "1.0", "FN?")]),
    ("autograd.dropout", [("x", X, "T"), ("ratio", "0.5", "FF")]),
    ("autograd.flatten", [("x", "X(2, 3, 2)", "T"), ("axis", "2", "I")]),
    ("autograd.squeeze", [("x", "X(2, 1, 3)", "T"), ("axis", "1", "SI?")]),
    ("autograd.unsqueeze", [("x", X, "T"), ("axis", "0", "SI")]),
    ("autograd.transpose", [("x", X, "T"), ("shape", "(1, 0)", "S?")]),
    ("autograd.tile", [("x", X, "T"), ("repeats", "(2, 1)", "SI")]),
    ("autograd.split", [("x", X, "T"), ("axis", "1", "I"), ("parts", "[1, 2]", "S")]),
    ("autograd.slice", [("x", X, "T"), ("starts", "[0]", "Sc"), ("ends", "[1]", "Sc"), ("axes", "[1]", "S?"),
                        ("steps", "[1]", "Sc?")]),
    ("autograd.reshape", [("x", X, "T"), ("shape", "(3, 2)", "S")]),
    ("autograd.cat", [("xs", "[X(), X()]", "TL"), ("axis", "0", "I")]),
    ("autograd.gather", [("x", X, "T"), ("axis", "1", "I"), ("indices", "[0, 2]", "S")]),
    ("autograd.onehot", [("axis", "-1", "I"), ("indices", "[0, 2]", "S"), ("depth", "3", "I1"),
                         ("values", "(0.0, 1.0)", "PAIR")]),
    ("autograd.scatter_elements", [("x", X, "T"), ("indices", "np.zeros((1, 3), np.int64)", "A"),
                                   ("updates", "np.ones((1, 3), np.float32)", "A"), ("axis", "0", "I")]),
    ("autograd.reduce_sum", [("x", X, "T"), ("axes", "[0]", "S?")]),
    ("autograd.reduce_mean", [("x", X, "T"), ("axes", "[1]", "S?")]),
    ("autograd.sum", [("x", X, "T")]),
    ("autograd.pad", [("x", X, "T"), ("mode", "'constant'", "N"), ("pads", "[0, 1, 0, 1]", "S"), ("constant", "0.0", "F")]),
    ("autograd.expand", [("x", "X(1, 3)", "T"), ("shape", "(2, 3)", "S")]),
    ("autograd.depth_to_space", [("x", "X(1, 4, 2, 2)", "T"), ("blocksize", "2", "I1")]),
    ("autograd.space_to_depth", [("x", "X(1, 1, 4, 4)", "T"), ("blocksize", "2", "I1")]),
    ("autograd.upsample", [("x", X, "T"), ("mode", "'nearest'", "N"), ("scales", "[1, 2]", "S")]),
    ("autograd.conv2d", [("x", "X(1, 1, 4, 4)", "T"), ("W", "X(2, 1, 3, 3)", "T"), ("b", "None", "T?"),
                         ("stride", "1", "SI"), ("padding", "(1, 1)", "SI")]),
    ("autograd.max_pool_2d", [("x", "X(1, 1, 4, 4)", "T"), ("kernel_size", "2", "SI"), ("stride", "2", "SI?"),
                              ("padding", "0", "SI")]),
    ("autograd.avg_pool_2d", [("x", "X(1, 1, 4, 4)", "T"), ("kernel_size", "(2, 2)", "SI"), ("stride", "None", "SI?"),
                              ("padding", "0", "SI")]),
    ("autograd.batchnorm", [("x", "X(2, 3, 2, 2)", "T"), ("scale", "X(3)", "T"), ("bias", "X(3)", "T"),
                            ("running_mean", "X(3)", "T"), ("running_var", "X(3)", "T"), ("training", "True", "BOOL"),
                            ("momentum", "0.1", "FF"), ("eps", "1e-5", "FF")]),
    ("autograd.layernorm", [("x", X, "T"), ("gamma", "X(3)", "T"), ("beta", "X(3)", "T"), ("eps", "1e-5", "FF")]),
    ("autograd.attention", [("q", "X(1, 2, 4)", "T"), ("k", "X(1, 2, 4)", "T"), ("v", "X(1, 2, 4)", "T"),
                            ("causal", "False", "BOOL"), ("scale", "0.5", "F")]),
    ("autograd.embedding", [("table", "X(5, 3)", "T"), ("indices", "T([1, 2], np.int32)", "T")]),
    ("autograd.softmax_cross_entropy", [("x", X, "T"), ("t", "T([0, 2], np.int32)", "T")]),
    ("autograd.mse_loss", [("x", X, "T"), ("t", X, "T")]),
    ("autograd.cross_entropy", [("y", X, "T"), ("t", X, "T")]),
    ("autograd.binary_cross_entropy", [("x", X, "T"), ("t", X, "T"), ("eps", "1e-4", "FF")]),
    ("autograd.cossim", [("a", X, "T"), ("b", X, "T")]),
    ("autograd.nonzero", [("x", X, "T")]),
    ("autograd.shape", [("x", X, "T")]),
    ("autograd.constant_of_shape", [("x", "T([2, 3], np.int64)", "T"), ("value", "1.0", "F")]),
    ("autograd.gemm", [("A", X, "T"), ("B", "X(3, 2)", "T"), ("C", "None", "T?"), ("alpha", "2.0", "F"),
                       ("beta", "1.0", "F")]),
    ("autograd.cast", [("x", X, "T"), ("dtype", "'float64'", "N?")]),
    ("autograd.globalaveragepool", [("x", "X(1, 2, 3, 3)", "T")]),
    ("autograd.backward", [("y", "autograd.reduce_sum(autograd.mul(P(), P()), [0, 1], 0)", "T")]),
    # ---- loom.layer: constructors, then forward on a constructed layer ----
    ("layer.Linear", [("in_features", "3", "I1?"), ("out_features", "2", "I1?")]),
    ("layer.Conv2d", [("nb_kernels", "2", "I1"), ("kernel_size", "3", "SI")]),
    ("layer.MaxPool2d", [("kernel_size", "2", "SI"), ("stride", "2", "SI?"), ("padding", "0", "SI")]),
    ("layer.AvgPool2d", [("kernel_size", "(2, 2)", "SI")]),
    ("layer.BatchNorm2d", [("num_features", "3", "I1?"), ("momentum", "0.9", "FF"), ("eps", "1e-5", "FF")]),
    ("layer.LayerNorm", [("normalized_shape", "3", "SI"), ("eps", "1e-5", "FF")]),
    ("layer.Embedding", [("num_embeddings", "5", "I1"), ("embedding_dim", "3", "I1")]),
    ("layer.MultiHeadAttention", [("dim", "4", "I1"), ("num_heads", "2", "I1")]),
    ("(lambda dropout: layer.MultiHeadAttention(4, 2, True, dropout))", [("dropout", "0.0", "FF")]),
    ("layer.LeakyReLU", [("slope", "0.1", "FF")]),
    ("layer.Dropout", [("ratio", "0.5", "FF")]),
    ("layer.Flatten", [("axis", "2", "I")]),
    ("layer.Gemm", [("nb_kernels", "2", "I1"), ("alpha", "1.0", "F"), ("beta", "1.0", "F")]),
    ("(lambda bias_shape: layer.Gemm(2, bias_shape=bias_shape))", [("bias_shape", "(1, 2)", "S?")]),
    ("layer.Cat", [("axis", "1", "I")]),
    ("layer.Linear(3, 2)", [("x", X, "T")]),
    ("layer.Linear(2)", [("x", X, "T")]),
    ("layer.Conv2d(2, 3, padding=1)", [("x", "X(1, 1, 4, 4)", "T")]),
    ("layer.BatchNorm2d()", [("x", "X(2, 3, 2, 2)", "T")]),
    ("layer.LayerNorm(3)", [("x", X, "T")]),
    ("layer.MaxPool2d(2)", [("x", "X(1, 1, 4, 4)", "T")]),
    ("layer.Flatten(2)", [("x", "X(2, 3, 2)", "T")]),
    ("layer.Gemm(2)", [("x", X, "T")]),
    ("layer.Cat(1)", [("xs", "[X(), X()]", "TL")]),
    ("layer.Add()", [("a", X, "TN"), ("b", X, "TN")]),
    ("layer.SoftMaxCrossEntropy()", [("x", X, "T"), ("t", "T([0, 2], np.int32)", "T")]),
    ("layer.Sequential(layer.Linear(3, 2), layer.ReLU())", [("x", X, "T")]),
    # ---- loom.opt, loom.schedule, loom.clip ----
    ("opt.SGD", [("lr", "0.1", "FF"), ("momentum", "0.9", "FF"), ("dampening", "0.0", "FF"),
                 ("weight_decay", "1e-4", "FF")]),
    ("opt.Adam", [("lr", "1e-3", "FF"), ("beta_1", "0.9", "FF"), ("beta_2", "0.999", "FF"), ("epsilon", "1e-8", "FF"),
                  ("weight_decay", "0.0", "FF"), ("dtype", "'float32'", "N?")]),
    ("(lambda decay_on: opt.AdamW(decay_on=decay_on))", [("decay_on", "'all'", "N")]),
    ("opt.AdaGrad", [("lr", "0.1", "FF"), ("epsilon", "1e-8", "FF")]),
    ("opt.RMSProp", [("lr", "0.1", "FF"), ("rho", "0.9", "FF")]),
    ("schedule.ExponentialDecay", [("init_value", "0.1", "FF"), ("decay_steps", "10", "I1"),
                                   ("decay_rate", "0.5", "FF")]),
    ("schedule.StepDecay", [("init_value", "0.1", "FF"), ("step_size", "10", "I1"), ("gamma", "0.5", "FF")]),
    ("schedule.MultiStepDecay", [("init_value", "0.1", "FF"), ("milestones", "[5, 10]", "S"), ("gamma", "0.5", "FF")]),
    ("schedule.CosineDecay", [("init_value", "0.1", "FF"), ("total_steps", "10", "I1"), ("min_value", "0.0", "FF")]),
    ("schedule.LinearWarmup", [("target", "0.1", "FF"), ("warmup_steps", "10", "I0"), ("start_value", "0.0", "FF")]),
    ("schedule.LinearDecay", [("start", "0.1", "FF"), ("end", "0.0", "FF"), ("steps", "10", "I0")]),
    ("schedule.set_schedule", [("optimizer", "opt.SGD(0.1)", "O"), ("scheduler", "schedule.Constant(0.1)", "O?")]),
    ("schedule.current_lr", [("optimizer", "opt.SGD(0.1)", "O"), ("device", "dev", "O")]),
    ("schedule.set_schedule_step", [("optimizer", "opt.SGD(0.1)", "O"), ("device", "dev", "O"), ("step", "3", "I")]),
    ("clip.set_grad_clip", [("optimizer", "opt.SGD(0.1)", "O"), ("max_norm", "1.0", "FF"), ("clip_value", "0.0", "FF"),
                            ("eps", "1e-6", "FF")]),
    ("clip.global_grad_norm", [("grads", "[X()]", "TL")]),
    ("clip.clip_scale", [("norm", "T(2.0, np.float64)", "T"), ("max_norm", "1.0", "FF"), ("eps", "1e-6", "FF")]),
    # ---- loom.initializer ----
    *[(f"initializer.{name}", [("t", "P()", "T")]) for name in ("he_normal", "glorot_uniform", "xavier", "msra", "eye")],
    ("initializer.fans", [("shape", "(3, 4)", "Sc")]),
    ("initializer.uniform", [("t", "P()", "T"), ("fan_in", "3", "I0"), ("fan_out", "2", "I0")]),
    ("initializer.constant", [("t", "P()", "T"), ("value", "0.5", "F")]),
    # ---- loom.io ----
    ("io.save_checkpoint", [("path", "os.path.join(TMP, 'c.ckpt')", "PATH"), ("tensors", "{'w': X()}", "DICT?")]),
    ("io.decode_checkpoint", [("data", "SAVED()", "B")]),
    ("io.load_checkpoint", [("path", "SAVED(path=True)", "PATH")]),
]


def _call(callee, args):
    return f"{callee}({', '.join(args)})"


def api_cases(add):
    """Adds the sweep's cases through probe.add: per row a healthy call (--all), and per argument
    and bad value an error case. The default subset holds one error case per row, its argument
    and value taken in turn, so that every kind and value is in it somewhere."""
    g = "api"
    for i, (callee, args) in enumerate(ROWS):
        healthy = [h for _, h, _ in args]
        add(g, f"{callee}-healthy", _call(callee, healthy), "ok", slow=True)
        swept = [k for k, (_, _, kind) in enumerate(args) if KINDS[kind.rstrip("?")]]
        pick = swept[i % len(swept)]
        for k, (name, _, kind) in enumerate(args):
            bad = [v for v in KINDS[kind.rstrip("?")] if not (kind.endswith("?") and v == "None")]
            for j, v in enumerate(bad):
                code = _call(callee, healthy[:k] + [v] + healthy[k + 1:])
                add(g, f"{callee}-{name}={v}", code, "error", slow=not (k == pick and j == (i // len(args)) % len(bad)))
