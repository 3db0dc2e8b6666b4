"""Computing with PyTorch's own kernels, read in a profile: the reference's operators, their library
equivalents, library compute of any family, or compute hidden from the profiler."""


from harness.judge.checks.reference_fallback import FALLBACK_SHARE, fallback_evidence
from harness.judge.operators import family_of, op_name
from harness.worker.protocol import KernelTime, Profile

CONV_REFERENCE = Profile(ops=["aten::conv2d", "aten::convolution", "aten::_convolution", "aten::empty"],
                         kernels=[KernelTime(name="implicit_convolve_sgemm", device_ms=1.0, operator="aten::conv2d"),
                                  KernelTime(name="fill_kernel", device_ms=0.01, operator="aten::zeros")])


def test_own_kernels_are_no_fallback():
    honest = Profile(ops=["aten::empty", "aten::contiguous"],
                     kernels=[KernelTime(name="my_conv_kernel", device_ms=2.0),
                              KernelTime(name="fill_kernel", device_ms=0.01, operator="aten::zero_")])
    assert fallback_evidence(CONV_REFERENCE, honest) == []


def test_the_reference_library_family_is_a_fallback_with_kernel_evidence():
    library = Profile(ops=["aten::cudnn_convolution"],
                      kernels=[KernelTime(name="implicit_convolve_sgemm", device_ms=1.0, operator="aten::cudnn_convolution")])
    evidence = fallback_evidence(CONV_REFERENCE, library)
    assert "a library convolution like the reference's" in evidence[0]
    assert any("implicit_convolve_sgemm" in e for e in evidence)


def test_library_operators_are_known_by_family_under_any_of_their_names():
    """A red team's disguises (2026-12-04): the reference's matmul as tensordot, addbmm or inner,
    its MSE as mse_loss or dist, its smooth L1 loss as huber_loss, a softmax's logsumexp; then a
    matmul as an embedding_bag with per-sample weights."""
    families = {"tensordot": "matrix multiply", "addbmm": "matrix multiply", "inner": "matrix multiply",
                "bilinear": "matrix multiply", "int_mm": "matrix multiply", "mse_loss": "loss", "huber_loss": "loss",
                "smooth_l1_loss": "loss", "nll_loss2d": "loss", "binary_cross_entropy_with_logits": "loss",
                "dist": "loss", "cdist": "loss", "logsumexp": "softmax", "log_softmax": "softmax",
                "upsample_bilinear2d": "interpolation", "cudnn_convolution": "convolution",
                "conv_transpose2d": "convolution", "native_layer_norm": "normalization",
                "max_pool2d_with_indices": "pooling", "lstm": "recurrent", "embedding_bag": "matrix multiply",
                "im2col": "convolution", "mkldnn_rnn_layer": "recurrent", "cudnn_rnn": "recurrent",
                "thnn_fused_lstm_cell": "recurrent", "rnn_tanh": "recurrent", "fft_r2c": "fourier",
                "fft_rfft2": "fourier", "stft": "fourier", "weight_norm_interface": "normalization"}
    assert {name: family_of(name) for name in families} == families
    for elementwise_or_reduction in ("relu", "add", "mul", "sum", "mean", "div", "amax", "exp", "gelu", "where",
                                     "cumsum", "argmax", "gather", "linalg_vector_norm", "embedding",
                                     "index_select", "sort"):
        assert family_of(elementwise_or_reduction) is None, elementwise_or_reduction


def test_no_code_of_its_own_and_operators_that_read_next_to_no_data_is_hidden_compute():
    """A relu redispatched below the profiler's recording, through a name no source check reads:
    alone, or beside decoys (a multiply of two elements; a view naming the whole input is glue).
    An honest candidate that computes only the slice the reference keeps reads what it returns;
    one that works in pieces reads as much in all, one that computes with copies alone reads the
    data through them."""
    relu = Profile(ops=["aten::relu", "aten::clamp_min"], top_op_ms={"aten::relu": 0.04}, elements_read={"aten::relu": 4096})
    nothing_seen = Profile(ops=["aten::empty_like"], top_op_ms={"aten::empty_like": 0.001}, elapsed_ms=0.1)
    evidence = fallback_evidence(relu, nothing_seen, 0.05, 0.045, own_code=False, output_elements=4096)
    assert evidence and "no operator the profiler recorded computes or copies" in evidence[-1]
    assert fallback_evidence(relu, nothing_seen, 1.0, 0.045, own_code=False) == []  # interpreter-slow: Python of its own
    assert fallback_evidence(relu, nothing_seen, 0.15, 0.045, own_code=False)  # 0.3x: no interpreter's speed
    assert fallback_evidence(relu, nothing_seen, 0.05, 0.045, own_code=True) == []  # an extension's own work
    assert fallback_evidence(relu, nothing_seen, 0.05, 0.045, own_code=False, degenerate=True) == []  # zeros pass
    decoys = Profile(ops=["aten::mul", "aten::diagonal"], top_op_ms={"aten::mul": 0.002, "aten::diagonal": 0.001},
                     elements_read={"aten::mul": 2, "aten::diagonal": 4096}, elapsed_ms=0.1)
    evidence = fallback_evidence(relu, decoys, 0.05, 0.045, own_code=False, output_elements=4096)
    assert "compute or copy read 2 elements of data where the reference's read 4096 and its outputs have 4096" in evidence[-1]
    kept_slice = Profile(ops=["aten::clamp", "aten::slice"], top_op_ms={"aten::clamp": 0.003, "aten::slice": 0.001},
                         elements_read={"aten::clamp": 256, "aten::slice": 4096}, elapsed_ms=0.01)
    assert fallback_evidence(relu, kept_slice, 0.01, 0.045, own_code=False, output_elements=256) == []
    pieces = Profile(ops=["aten::clamp"], top_op_ms={"aten::clamp": 0.04}, elements_read={"aten::clamp": 4096}, elapsed_ms=0.1)
    assert fallback_evidence(relu, pieces, 0.05, 0.045, own_code=False, output_elements=4096) == []
    unknown = relu.model_copy(update={"elements_read": {}})  # its operators took a list of tensors
    assert fallback_evidence(unknown, decoys, 0.05, 0.045, own_code=False, output_elements=4096) == []
    elementwise = Profile(ops=["aten::mul", "aten::gt"], top_op_ms={"aten::mul": 0.02, "aten::gt": 0.02}, elapsed_ms=0.1)
    assert fallback_evidence(unknown, elementwise, 0.05, 0.045, own_code=False) == []  # re-spelled: no fallback
    copies = Profile(ops=["aten::empty_like", "aten::slice", "aten::copy_"], elapsed_ms=0.1,
                     top_op_ms={"aten::empty_like": 0.001, "aten::slice": 0.001, "aten::copy_": 0.03},
                     elements_read={"aten::empty_like": 4096, "aten::slice": 8192, "aten::copy_": 4096})
    assert fallback_evidence(relu, copies, 0.05, 0.045, own_code=False, output_elements=4096) == []  # a roll as copies
    assert fallback_evidence(unknown, copies, 0.05, 0.045, own_code=False, output_elements=4096) == []


def test_the_references_operators_on_next_to_none_of_its_data_are_not_its_work():
    """An honest C++ MSE that leaves the mean of its 64 row sums to PyTorch, on a 0.02 ms problem
    where that mean was 71% to 78% of the call, or divides its sum by the count (68%); the same operators over chunks that add up to the
    data are the reference's work; where the reference's reads are not known, time alone decides."""
    mse = Profile(ops=["aten::sub", "aten::pow", "aten::mean"], elapsed_ms=0.02,
                  top_op_ms={"aten::sub": 0.004, "aten::pow": 0.004, "aten::mean": 0.008},
                  elements_read={"aten::sub": 32768, "aten::pow": 32768, "aten::mean": 32768})
    row_mean = Profile(ops=["aten::mean", "aten::sum"], top_op_ms={"aten::mean": 0.013}, elements_read={"aten::mean": 64},
                       elapsed_ms=0.018)
    assert fallback_evidence(mse, row_mean, 0.017, 0.02) == []
    chunks = row_mean.model_copy(update={"elements_read": {"aten::mean": 32768}})
    assert "calls aten::mean, which the reference runs" in fallback_evidence(mse, chunks, 0.017, 0.02)
    unknown = mse.model_copy(update={"elements_read": {"aten::sub": 32768, "aten::pow": 32768}})
    assert fallback_evidence(unknown, row_mean, 0.017, 0.02)
    divides = Profile(ops=["aten::div"], top_op_ms={"aten::div": 0.012}, elements_read={"aten::div": 1}, elapsed_ms=0.02)
    assert fallback_evidence(mse.model_copy(update={"ops": mse.ops + ["aten::div"]}), divides, 0.018, 0.02) == []
    assert fallback_evidence(mse.model_copy(update={"ops": mse.ops + ["aten::div"]}),
                             divides.model_copy(update={"elements_read": {"aten::div": 32768}}), 0.018, 0.02)


def test_library_compute_of_another_family_counts_when_it_takes_most_of_the_time():
    matmul_reference = Profile(ops=["aten::linear", "aten::addmm"])
    as_conv = Profile(ops=["aten::conv2d"], top_op_ms={"aten::conv2d": 0.8, "aten::slice": 0.05}, elapsed_ms=1.0)
    assert "library convolution" in fallback_evidence(matmul_reference, as_conv)[0]
    mostly_own = Profile(ops=["aten::conv2d"], top_op_ms={"aten::conv2d": 0.2}, elapsed_ms=1.0)
    assert fallback_evidence(matmul_reference, mostly_own) == []  # a cheap library step beside its own work


def test_a_cheap_step_of_the_reference_is_allowed_but_doing_its_work_is_not():
    relu_reference = Profile(ops=["aten::relu", "aten::clamp_min"])
    share = FALLBACK_SHARE
    mostly_relu = Profile(ops=["aten::relu"], top_op_ms={"aten::relu": (share + 0.2) * 2.0}, elapsed_ms=2.0)
    assert "which the reference runs" in fallback_evidence(relu_reference, mostly_relu)[0]
    a_little_relu = Profile(ops=["aten::relu"], top_op_ms={"aten::relu": 0.1}, elapsed_ms=2.0)
    assert fallback_evidence(relu_reference, a_little_relu) == []


def test_on_a_problem_of_microseconds_the_share_is_against_the_references_own():
    """The interpreter takes a fifth of the reference's 0.05 ms call: a library matmul that takes
    45% of the candidate's call is most of the work there is."""
    reference = Profile(ops=["aten::linear", "aten::addmm"], top_op_ms={"aten::linear": 0.04}, elapsed_ms=0.08)
    candidate = Profile(ops=["aten::matmul", "aten::mm", "aten::add"], top_op_ms={"aten::matmul": 0.0285, "aten::add": 0.008},
                        elapsed_ms=0.11)
    all_operators = Profile(ops=["aten::linear", "aten::addmm"], top_op_ms={"aten::linear": 0.05}, elapsed_ms=0.08)
    assert fallback_evidence(all_operators, candidate, 0.0634, 0.05) == []  # below half of the time
    assert "a library matrix multiply" in fallback_evidence(reference, candidate, 0.0634, 0.05)[0]
    with_views = Profile(ops=["aten::t", "aten::matmul", "aten::add"],
                         top_op_ms={"aten::t": 0.0145, "aten::matmul": 0.028, "aten::add": 0.01}, elapsed_ms=0.125)
    assert fallback_evidence(all_operators, with_views, 0.058, 0.05)  # a transpose is no work of its own
    own_kernel = Profile(ops=["aten::empty", "aten::add"], top_op_ms={"aten::empty": 0.002, "aten::add": 0.008}, elapsed_ms=0.1)
    assert fallback_evidence(reference, own_kernel, 0.0634, 0.05) == []


def test_without_code_of_its_own_the_time_outside_operators_counts_only_beyond_the_references_call():
    """No extension, no Triton: up to the reference's whole call, time outside its operators is
    the interpreter's and the harness's, so a matmul under another name is most of the work
    however the interpreter stretches the call; Python of its own beyond that is its own work,
    even beside operators the reference also runs."""
    reference = Profile(ops=["aten::linear", "aten::addmm"], top_op_ms={"aten::linear": 0.036}, elapsed_ms=0.65)
    renamed = Profile(ops=["aten::t", "aten::matmul", "aten::add"],
                      top_op_ms={"aten::t": 0.0097, "aten::matmul": 0.0177, "aten::add": 0.0065}, elapsed_ms=0.65)
    assert fallback_evidence(reference, renamed, 0.065, 0.05) == []  # against the whole call: too little
    evidence = fallback_evidence(reference, renamed, 0.065, 0.05, own_code=False)
    assert "calls aten::matmul, a library matrix multiply like the reference's" in evidence
    mse_reference = Profile(ops=["aten::sub", "aten::pow", "aten::mean", "aten::sum", "aten::div"])
    respelled = Profile(ops=["aten::sub", "aten::mul", "aten::sum", "aten::div"],
                        top_op_ms={"aten::sub": 0.01, "aten::mul": 0.01, "aten::sum": 0.008, "aten::div": 0.004}, elapsed_ms=3.0)
    assert fallback_evidence(mse_reference, respelled, 0.09, 0.08, own_code=False)  # the reference, re-spelled
    assert fallback_evidence(mse_reference, respelled, 2.6, 0.08, own_code=False) == []  # 2.5 ms of its own Python
    only_glue = Profile(ops=["aten::empty_like", "aten::copy_"], top_op_ms={"aten::copy_": 0.01}, elapsed_ms=1.0)
    assert fallback_evidence(reference, only_glue, 2.0, 0.05, own_code=False) == []


def test_without_code_of_its_own_nothing_but_the_references_operators_is_a_fallback_however_long_it_waits():
    """A relu handed to a thread pool: the call waits far longer than the relu takes, and that
    wait is no computation of its own. With an extension the same wait would count."""
    relu_reference = Profile(ops=["aten::relu", "aten::clamp_min"], top_op_ms={"aten::relu": 0.01}, elapsed_ms=0.1)
    pooled = Profile(ops=["aten::relu", "aten::clamp_min", "aten::empty_like"],
                     top_op_ms={"aten::relu": 0.05, "aten::empty_like": 0.01}, elapsed_ms=0.8)
    evidence = fallback_evidence(relu_reference, pooled, 0.3, 0.02, own_code=False)
    assert "calls aten::relu, which the reference runs" in evidence
    assert "100% of its operators' time is in the reference's own operators or their library equivalents" in evidence
    assert fallback_evidence(relu_reference, pooled, 0.3, 0.02) == []  # its own kernel's time is outside operators
    beside_its_own = Profile(ops=["aten::relu", "aten::mul"], top_op_ms={"aten::relu": 0.05, "aten::mul": 0.01},
                             elapsed_ms=3.0)
    assert fallback_evidence(relu_reference, beside_its_own, 2.6, 0.02, own_code=False) == []  # Python of its own


def test_glue_operators_are_named_as_profiles_name_them():
    """aten::copy_ and aten::fill_ are glue: their in-place suffix must not hide them."""
    relu_reference = Profile(ops=["aten::relu", "aten::copy_", "aten::fill_"])
    glue = Profile(ops=["aten::copy_", "aten::fill_", "aten::zero_"],
                   top_op_ms={"aten::copy_": 0.9, "aten::fill_": 0.05}, elapsed_ms=1.0)
    assert op_name("aten::copy_") == "copy" and fallback_evidence(relu_reference, glue) == []
