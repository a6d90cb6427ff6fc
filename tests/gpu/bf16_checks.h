// tests/gpu/bf16_checks.h — gpu_ops.c's checks of bf16 products
// (ops_set_matmul_bf16(1), training.precision = bf16): the matrix products (the
// loss's bf16 gradient and the bf16 weight copy: bf16_step_checks.h), and the
// bf16 helpers bf16_kernel_checks.h and bf16_step_checks.h use (the tensor-core
// attention and the element-wise kernels on bf16). Included once, by gpu_ops.c,
// after its helpers (Pair, expect_close, TOL): one translation unit, so the
// PASS/FAIL counts of check.h are one.
#ifndef FEMTOTRON_GPU_BF16_CHECKS_H
#define FEMTOTRON_GPU_BF16_CHECKS_H

// x rounded to the nearest bf16, ties to even, as a float (the GPU's
// __float2bfloat16_rn): the host's rounding (ops/bf16.h), widened back.
static float round_bf16(float x) { return bf16_to_f32(bf16_from_f32(x)); }

static float *rounded_range(const float *h, size_t n) {  // (n) h rounded to bf16
    float *r = xmalloc((n ? n : 1) * sizeof(float), "bf16-rounded operand");
    for (size_t i = 0; i < n; i++) r[i] = round_bf16(h[i]);
    return r;
}
static float *rounded_copy(Pair p) { return rounded_range(p.h, p.n); }  // (p.n) the host side rounded

// bf16 products (ops_set_matmul_bf16(1), training.precision = bf16): the GPU
// rounds each operand to bf16 and sums the products in fp32. A product of two bf16
// values is exact in fp32, so the result is the CPU's fp32 product of the rounded
// operands up to the order (and the tensor cores' rounding) of sums of at most 257
// terms: within TOL, the same 1e-5 as fp32. And it is NOT the fp32 product of the
// unrounded operands: rounding each input moves it by up to 2^-9 relative, so the
// two differ by ~1e-3 relative, far above TOL (the flag does something). Run with
// an odd output width too (the main job's 257-token vocabulary: bf16 copies whose
// columns would not be 16-byte aligned without padding).
static void test_matmul_bf16(int N, int in, int out, int ld) {
    Pair x = pair_fill((size_t)N * in, 1.0f), w = pair_fill((size_t)out * in, 0.1f);
    Pair y = pair_fill((size_t)N * out, 1.0f), ywide = pair_fill((size_t)N * ld, 1.0f);
    Pair dy = pair_fill((size_t)N * out, 1.0f), dywide = pair_fill((size_t)N * ld, 1.0f);  // douts, both sides equal
    float *xr = rounded_copy(x), *wr = rounded_copy(w), *dyr = rounded_copy(dy), *dywr = rounded_copy(dywide);
    ops_set_matmul_bf16(1);
    matmul_forward(y.d, x.d, w.d, N, in, out);
    cpu_matmul_forward(y.h, x.h, w.h, N, in, out);  // the unrounded fp32 product first
    double off = pair_diff(y);
    CHECK(off > 20 * TOL, "bf16 matmul_forward differs from the unrounded fp32 product (rel. %.2e > %.0e)", off,
          20 * TOL);
    cpu_matmul_forward(y.h, xr, wr, N, in, out);
    expect_close("bf16 matmul_forward (vs rounded operands)", y);
    matmul_forward_ld(ywide.d + 7, ld, x.d, w.d, N, in, out);
    cpu_matmul_forward_ld(ywide.h + 7, ld, xr, wr, N, in, out);
    expect_close("bf16 matmul_forward_ld (offset 7)", ywide);
    Pair dw = pair_fill((size_t)out * in, 1.0f), dx = pair_fill((size_t)N * in, 1.0f);
    for (int acc = 0; acc < 2; acc++) {
        matmul_backward(dx.d, dw.d, dy.d, x.d, w.d, N, in, out, acc);
        cpu_matmul_backward(dx.h, dw.h, dyr, xr, wr, N, in, out, acc);
        expect_close(acc ? "bf16 matmul_backward din (accumulate)" : "bf16 matmul_backward din (overwrite)", dx);
        expect_close("bf16 matmul_backward dweight (+= in fp32)", dw);
    }
    matmul_backward_ld(dx.d, dw.d, dywide.d + 7, ld, x.d, w.d, N, in, out, 1);
    cpu_matmul_backward_ld(dx.h, dw.h, dywr + 7, ld, xr, wr, N, in, out, 1);
    expect_close("bf16 matmul_backward_ld din", dx);
    expect_close("bf16 matmul_backward_ld dweight", dw);
    float *a1 = xmalloc(dw.n * sizeof(float), "a1"), *a2 = xmalloc(dw.n * sizeof(float), "a2");
    for (int r = 0; r < 2; r++) {
        zero_f32(dw.d, dw.n);
        matmul_backward(dx.d, dw.d, dy.d, x.d, w.d, N, in, out, 0);
        ops_download(r ? a2 : a1, dw.d, dw.n * sizeof(float));
    }
    CHECK(!memcmp(a1, a2, dw.n * sizeof(float)), "bf16 matmul_backward dweight twice: bit-identical");
    ops_set_matmul_bf16(0);
    matmul_forward(y.d, x.d, w.d, N, in, out);  // and back to fp32 products
    cpu_matmul_forward(y.h, x.h, w.h, N, in, out);
    expect_close("matmul_forward in fp32 again after bf16", y);
    free(a1), free(a2), free(xr), free(wr), free(dyr), free(dywr);
    pair_free(x), pair_free(w), pair_free(y), pair_free(ywide), pair_free(dy), pair_free(dywide), pair_free(dw),
        pair_free(dx);
}

// bf16 value bits as an ordered integer (negative values below positive ones), so
// that the difference of two is their distance in bf16 units in the last place.
static int bf16_order(uint16_t b) { return b & 0x8000 ? -(int)(b & 0x7fff) : (int)b; }

// Two bf16 arrays: how many values have the same bits, and the largest distance in ulps.
static size_t bf16_compare(const uint16_t *a, const uint16_t *b, size_t n, int *max_ulp) {
    size_t same = 0;
    *max_ulp = 0;
    for (size_t i = 0; i < n; i++) {
        const int d = abs(bf16_order(a[i]) - bf16_order(b[i]));
        same += d == 0;
        *max_ulp = d > *max_ulp ? d : *max_ulp;
    }
    return same;
}

// A device bf16 copy of p's values rounded (p.n halves, buf_free it), and p itself
// (host and device) made those values widened: the fp32 twin of the bf16 operand.
static uint16_t *bf16_twin(Pair p, const char *what) {
    uint16_t *d = buf_alloc(MEM_ACTIVATIONS, p.n * sizeof(uint16_t), what);  // (p.n)
    uint16_t *h = xmalloc(p.n * sizeof(uint16_t), what);
    cpu_round_to_bf16(h, p.h, p.n);
    ops_upload(d, h, p.n * sizeof(uint16_t));
    for (size_t i = 0; i < p.n; i++) p.h[i] = bf16_to_f32(h[i]);
    ops_upload(p.d, p.h, p.n * sizeof(float));
    free(h);
    return d;
}

// matmul_forward_bf16 (a bf16 run's gate|up, its input the norm's bf16 output):
// the product written as bf16 by cuBLASLt from its fp32 sums, against the same
// product of the widened input written in fp32 and then rounded by round_to_bf16.
// cuBLASLt may pick another algorithm for the bf16 output, summing in another
// order, so a value lying within fp32's rounding of a bf16 midpoint may round the
// other way: at most 1 ulp apart, and (such values are rare) at least 99% the
// same bits; the emulated GPU sums both the same way, all bits equal. Neither
// scratch is touched. With fp32 products the op widens the input into its scratch
// and writes the fp32 product into the other (within TOL of the CPU's), then
// rounds it (all bits equal to that product rounded on the host); and the input's
// scratch may be the input's own buffer (in place).
static void test_matmul_forward_bf16(int N, int in, int out) {
    const size_t n = (size_t)N * out, nx = (size_t)N * in;
    Pair x = pair_fill(nx, 1.0f), w = pair_fill((size_t)out * in, 0.1f), y = pair_fill(n, 1.0f);
    Pair scr = pair_fill(n, 1.0f), xs = pair_fill(nx, 1.0f);  // the scratches, holding values of their own
    Pair room = pair_fill(nx, 1.0f);
    uint16_t *x16 = bf16_twin(x, "bf16 input");  // (N, in); x: its widened values
    uint16_t *o16 = buf_alloc(MEM_ACTIVATIONS, n * sizeof(uint16_t), "bf16 product");       // (N, out)
    uint16_t *r16 = buf_alloc(MEM_ACTIVATIONS, n * sizeof(uint16_t), "rounded product");    // (N, out)
    uint16_t *a = xmalloc(n * sizeof(uint16_t), "bf16 product"), *b = xmalloc(n * sizeof(uint16_t), "rounded");
    uint16_t *x16_h = xmalloc(nx * sizeof(uint16_t), "bf16 input");
    ops_download(x16_h, x16, nx * sizeof(uint16_t));
    ops_set_matmul_bf16(1);
    matmul_forward_bf16(o16, scr.d, x16, xs.d, w.d, N, in, out);
    matmul_forward(y.d, x.d, w.d, N, in, out);
    round_to_bf16(r16, y.d, n);
    ops_download(a, o16, n * sizeof(uint16_t));
    ops_download(b, r16, n * sizeof(uint16_t));
    int ulp;
    size_t same = bf16_compare(a, b, n, &ulp);
    CHECK(ulp <= 1 && same * 100 >= n * 99,
          "bf16 matmul_forward_bf16 (%dx%dx%d) = round_to_bf16(matmul_forward of the widened input): %zu of %zu bits "
          "equal, at most %d ulp apart", N, in, out, same, n, ulp);
    CHECK(pair_diff(scr) == 0.0 && pair_diff(xs) == 0.0, "bf16 matmul_forward_bf16 leaves its fp32 scratches alone");
    ops_set_matmul_bf16(0);
    matmul_forward_bf16(o16, scr.d, x16, xs.d, w.d, N, in, out);
    cpu_matmul_forward(scr.h, x.h, w.h, N, in, out);
    expect_close("fp32 matmul_forward_bf16: its output scratch", scr);
    // Its bf16 output is its own fp32 product rounded, bit for bit. Not the CPU's
    // product rounded: the two fp32 products differ within TOL of the largest value,
    // which for a value near zero (cancellation) is several bf16 ulps of its own
    // (seen on an H200: 3 ulp for 2 of 7482 values, whose fp32 sums agreed to 3.6e-7).
    float *scr_d = xmalloc(n * sizeof(float), "fp32 product");  // (N, out)
    ops_download(scr_d, scr.d, n * sizeof(float));
    cpu_round_to_bf16(b, scr_d, n);
    free(scr_d);
    ops_download(a, o16, n * sizeof(uint16_t));
    same = bf16_compare(a, b, n, &ulp);
    ops_upload(room.d, x16_h, nx * sizeof(uint16_t));  // x16 at the start of a buffer with room for its floats
    matmul_forward_bf16(r16, scr.d, (uint16_t *)room.d, room.d, w.d, N, in, out);
    uint16_t *c = xmalloc(n * sizeof(uint16_t), "in place");
    ops_download(c, r16, n * sizeof(uint16_t));
    memcpy(room.h, x.h, nx * sizeof(float));
    const int in_place = !memcmp(c, a, n * sizeof(uint16_t)) && pair_diff(room) == 0.0;
    CHECK(same == n && in_place,
          "fp32 matmul_forward_bf16 = its fp32 product rounded: %zu of %zu bits equal, at most %d ulp apart; the "
          "input widened in place gives the same bits", same, n, ulp);
    buf_free(o16), buf_free(r16), buf_free(x16);
    free(a), free(b), free(c), free(x16_h);
    pair_free(x), pair_free(w), pair_free(y), pair_free(scr), pair_free(xs), pair_free(room);
}

// matmul_*_from_bf16 (a bf16 run's down projection): the input kept as bf16 and
// handed to cuBLASLt as the operand that matmul_forward would round the widened
// input to, so with bf16 products the same plan and the same bits as
// matmul_forward / matmul_backward of the widened input, and the scratch untouched
// (an in_dim that is not a multiple of 8 read through the padded copy a rounded
// fp32 input gets). Against the CPU: the product of the widened input and the
// rounded weight, within TOL. With fp32 products the scratch path, within TOL too.
static void test_matmul_from_bf16(int N, int in, int out) {
    const size_t nx = (size_t)N * in, ny = (size_t)N * out;
    Pair x = pair_fill(nx, 1.0f), w = pair_fill((size_t)out * in, 0.1f), scr = pair_fill(nx, 1.0f);
    Pair y = pair_fill(ny, 1.0f), y2 = pair_fill(ny, 1.0f), dy = pair_fill(ny, 1.0f);
    Pair dx = pair_fill(nx, 1.0f), dx2 = pair_fill(nx, 1.0f), dw = pair_fill((size_t)out * in, 1.0f);
    Pair dw2 = pair_fill((size_t)out * in, 1.0f);
    uint16_t *x16_d = bf16_twin(x, "bf16 input");  // (N, in); x: the widened input on both sides
    const size_t nmax = nx > ny ? nx : ny;
    float *wr = rounded_copy(w), *a = xmalloc(nmax * sizeof(float), "result"), *b = xmalloc(nmax * sizeof(float), "result");
    float *ga = xmalloc(dw.n * sizeof(float), "dw"), *gb = xmalloc(dw.n * sizeof(float), "dw");
    ops_set_matmul_bf16(1);
    matmul_forward_from_bf16(y.d, x16_d, scr.d, w.d, N, in, out);
    matmul_forward(y2.d, x.d, w.d, N, in, out);
    ops_download(a, y.d, ny * sizeof(float));
    ops_download(b, y2.d, ny * sizeof(float));
    CHECK(!memcmp(a, b, ny * sizeof(float)), "bf16 matmul_forward_from_bf16 (%dx%dx%d) = matmul_forward of the "
          "widened input, bit for bit", N, in, out);
    CHECK(pair_diff(scr) == 0.0, "bf16 matmul_forward_from_bf16 (in %d) leaves its scratch alone", in);
    cpu_matmul_forward(y.h, x.h, wr, N, in, out);
    expect_close("bf16 matmul_forward_from_bf16 vs the CPU", y);
    copy_f32(dw2.d, dw.d, dw.n);  // dweight accumulates: both start from the same values
    for (int r = 0; r < 2; r++) {  // din overwritten, then accumulated
        matmul_backward_from_bf16(dx.d, dw.d, dy.d, x16_d, scr.d, w.d, N, in, out, r);
        matmul_backward(dx2.d, dw2.d, dy.d, x.d, w.d, N, in, out, r);
    }
    ops_download(a, dx.d, nx * sizeof(float));
    ops_download(b, dx2.d, nx * sizeof(float));
    ops_download(ga, dw.d, dw.n * sizeof(float));
    ops_download(gb, dw2.d, dw.n * sizeof(float));
    CHECK(!memcmp(ga, gb, dw.n * sizeof(float)) && !memcmp(a, b, nx * sizeof(float)),
          "bf16 matmul_backward_from_bf16 (%dx%dx%d) = matmul_backward of the widened input (dweight, din), bit for "
          "bit", N, in, out);
    ops_set_matmul_bf16(0);
    matmul_forward_from_bf16(y.d, x16_d, scr.d, w.d, N, in, out);
    cpu_matmul_forward(y.h, x.h, w.h, N, in, out);
    expect_close("fp32 matmul_forward_from_bf16 vs the CPU", y);
    buf_free(x16_d);
    free(wr), free(a), free(b), free(ga), free(gb);
    pair_free(x), pair_free(w), pair_free(scr), pair_free(y), pair_free(y2), pair_free(dy), pair_free(dx),
        pair_free(dx2), pair_free(dw), pair_free(dw2);
}

// matmul_forward_add and matmul_forward_from_bf16_add (the o and down products on
// one tensor-parallel rank, the residual add in cuBLASLt's epilogue: C = the
// residual, D = out): the product plus the residual, one fp32 rounding, as the
// product followed by residual_forward on the GPU (its plan may differ, the +C
// key being another, so within 2^-20 of the largest value rather than bit for
// bit; the emulation's epilogue gives the same bits), the residual untouched,
// and against the CPU within TOL; bf16 and fp32 products, fp32 and bf16 inputs.
static void test_matmul_forward_add(int N, int in, int out) {
    const size_t nx = (size_t)N * in, ny = (size_t)N * out;
    Pair x = pair_fill(nx, 1.0f), w = pair_fill((size_t)out * in, 0.1f), res = pair_fill(ny, 4.0f);
    Pair y = pair_fill(ny, 1.0f), y2 = pair_fill(ny, 1.0f), scr = pair_fill(nx, 1.0f);
    uint16_t *x16_d = bf16_twin(x, "bf16 input");  // (N, in); x: the widened input on both sides
    float *a = xmalloc(ny * sizeof(float), "fused"), *b = xmalloc(ny * sizeof(float), "unfused");
    float *wr = rounded_copy(w);  // (out, in) the weight as bf16 products read it
    for (int bf16 = 0; bf16 < 2; bf16++)
        for (int from16 = 0; from16 < 2; from16++) {
            ops_set_matmul_bf16(bf16);
            if (from16) {
                matmul_forward_from_bf16_add(y.d, res.d, x16_d, scr.d, w.d, N, in, out);
                matmul_forward_from_bf16(y2.d, x16_d, scr.d, w.d, N, in, out);
            } else {
                matmul_forward_add(y.d, res.d, x.d, w.d, N, in, out);
                matmul_forward(y2.d, x.d, w.d, N, in, out);
            }
            residual_forward(y2.d, y2.d, res.d, ny);
            ops_download(a, y.d, ny * sizeof(float));
            ops_download(b, y2.d, ny * sizeof(float));
            double num = 0.0, den = 0.0;
            size_t same = 0;
            for (size_t i = 0; i < ny; i++) {
                num = fmax(num, fabs((double)a[i] - b[i]) + (isnan(a[i]) ? INFINITY : 0.0));
                den = fmax(den, fabs((double)b[i]));
                same += !memcmp(&a[i], &b[i], sizeof(float));
            }
            const char *op = from16 ? "matmul_forward_from_bf16_add" : "matmul_forward_add";
            CHECK(num <= ldexp(den, -20) && pair_diff(res) == 0.0,
                  "%s %s (%dx%dx%d) = the product then residual_forward within 2^-20 (%.2e; %zu of %zu bits equal), "
                  "the residual untouched", bf16 ? "bf16" : "fp32", op, N, in, out, num / den, same, ny);
            cpu_matmul_forward(y.h, x.h, bf16 ? wr : w.h, N, in, out);
            for (size_t i = 0; i < ny; i++) y.h[i] += res.h[i];
            expect_close(bf16 ? "bf16 forward + residual vs the CPU" : "fp32 forward + residual vs the CPU", y);
        }
    ops_set_matmul_bf16(0);
    buf_free(x16_d);
    free(a), free(b), free(wr);
    pair_free(x), pair_free(w), pair_free(res), pair_free(y), pair_free(y2), pair_free(scr);
}

// matmul_backward_input_to_bf16 (a bf16 run's down product: its input gradient,
// which only SwiGLU's backward reads, written as bf16): as matmul_forward_bf16,
// cuBLASLt's bf16 output against the fp32 input gradient rounded, at most 1 ulp
// apart and at least 99% the same bits, the scratch untouched; with fp32 products
// the fp32 product in the scratch (within TOL of the CPU's), then rounded, bit for bit.
static void test_matmul_input_to_bf16(int N, int in, int out) {
    const size_t n = (size_t)N * in;
    Pair dy = pair_fill((size_t)N * out, 1.0f), w = pair_fill((size_t)out * in, 0.1f);
    Pair dx = pair_fill(n, 1.0f), scr = pair_fill(n, 1.0f);
    uint16_t *d16 = buf_alloc(MEM_ACTIVATIONS, n * sizeof(uint16_t), "bf16 din");  // (N, in)
    uint16_t *r16 = buf_alloc(MEM_ACTIVATIONS, n * sizeof(uint16_t), "rounded din");
    uint16_t *a = xmalloc(n * sizeof(uint16_t), "bf16 din"), *b = xmalloc(n * sizeof(uint16_t), "rounded");
    float *f = xmalloc(n * sizeof(float), "fp32 din");
    ops_set_matmul_bf16(1);
    matmul_backward_input_to_bf16(d16, scr.d, dy.d, w.d, N, in, out);
    matmul_backward(dx.d, NULL, dy.d, NULL, w.d, N, in, out, 0);
    round_to_bf16(r16, dx.d, n);
    ops_download(a, d16, n * sizeof(uint16_t));
    ops_download(b, r16, n * sizeof(uint16_t));
    int ulp;
    size_t same = bf16_compare(a, b, n, &ulp);
    CHECK(ulp <= 1 && same * 100 >= n * 99 && pair_diff(scr) == 0.0,
          "bf16 matmul_backward_input_to_bf16 (%dx%dx%d) = round_to_bf16(matmul_backward's din): %zu of %zu bits "
          "equal, at most %d ulp apart; the scratch untouched", N, in, out, same, n, ulp);
    ops_set_matmul_bf16(0);
    matmul_backward_input_to_bf16(d16, scr.d, dy.d, w.d, N, in, out);
    cpu_matmul_backward(scr.h, NULL, dy.h, NULL, w.h, N, in, out, 0);
    expect_close("fp32 matmul_backward_input_to_bf16: its scratch", scr);
    ops_download(f, scr.d, n * sizeof(float));
    cpu_round_to_bf16(b, f, n);
    ops_download(a, d16, n * sizeof(uint16_t));
    same = bf16_compare(a, b, n, &ulp);
    CHECK(same == n, "fp32 matmul_backward_input_to_bf16 (%dx%dx%d): its fp32 product rounded, %zu of %zu bits equal",
          N, in, out, same, n);
    buf_free(d16), buf_free(r16);
    free(a), free(b), free(f);
    pair_free(dy), pair_free(w), pair_free(dx), pair_free(scr);
}

// matmul_backward_from_bf16_to_bf16 (the o product under cuDNN's attention: din as
// bf16 for cuDNN, dweight from the output kept as bf16, one rounding of dout): with
// bf16 products dweight bit for bit matmul_backward_from_bf16's (the same product on
// the same operands) and din16 its fp32 din rounded, at most 1 ulp apart and at
// least 99% the same bits (as matmul_forward_bf16); with fp32 products din goes
// through din_scratch (within TOL of the CPU's) and is rounded from it, bit for bit.
static void test_matmul_from_bf16_to_bf16(int N, int in, int out) {
    const size_t n = (size_t)N * in, nw = (size_t)out * in;
    Pair dy = pair_fill((size_t)N * out, 1.0f), w = pair_fill(nw, 0.1f), x = pair_fill(n, 1.0f);
    Pair dx = pair_fill(n, 1.0f), scr = pair_fill(n, 1.0f), xs = pair_fill(n, 1.0f);
    Pair dw = pair_fill(nw, 1.0f), dw2 = pair_fill(nw, 1.0f);
    uint16_t *x16 = bf16_twin(x, "bf16 input");  // (N, in); x: the widened input on both sides
    copy_f32(dw2.d, dw.d, nw);  // dweight accumulates: both start from the same values
    uint16_t *d16 = buf_alloc(MEM_ACTIVATIONS, n * sizeof(uint16_t), "bf16 din");  // (N, in)
    uint16_t *r16 = buf_alloc(MEM_ACTIVATIONS, n * sizeof(uint16_t), "rounded din");
    uint16_t *a = xmalloc(n * sizeof(uint16_t), "bf16 din"), *b = xmalloc(n * sizeof(uint16_t), "rounded");
    float *ga = xmalloc(nw * sizeof(float), "dw"), *gb = xmalloc(nw * sizeof(float), "dw");
    ops_set_matmul_bf16(1);
    matmul_backward_from_bf16_to_bf16(d16, NULL, dw.d, dy.d, x16, xs.d, w.d, N, in, out);
    matmul_backward_from_bf16(dx.d, dw2.d, dy.d, x16, xs.d, w.d, N, in, out, 0);
    round_to_bf16(r16, dx.d, n);
    ops_download(a, d16, n * sizeof(uint16_t)), ops_download(b, r16, n * sizeof(uint16_t));
    ops_download(ga, dw.d, nw * sizeof(float)), ops_download(gb, dw2.d, nw * sizeof(float));
    int ulp;
    size_t same = bf16_compare(a, b, n, &ulp);
    CHECK(ulp <= 1 && same * 100 >= n * 99 && !memcmp(ga, gb, nw * sizeof(float)) && pair_diff(xs) == 0.0,
          "bf16 matmul_backward_from_bf16_to_bf16 (%dx%dx%d): din16 = matmul_backward_from_bf16's din rounded (%zu of "
          "%zu bits equal, at most %d ulp apart), dweight its bits; the scratch untouched", N, in, out, same, n, ulp);
    ops_set_matmul_bf16(0);
    ops_download(dw.h, dw.d, nw * sizeof(float));  // dweight accumulates onto what the GPU holds
    matmul_backward_from_bf16_to_bf16(d16, scr.d, dw.d, dy.d, x16, xs.d, w.d, N, in, out);
    cpu_matmul_backward(scr.h, dw.h, dy.h, x.h, w.h, N, in, out, 0);
    expect_close("fp32 matmul_backward_from_bf16_to_bf16: din's scratch", scr);
    expect_close("fp32 matmul_backward_from_bf16_to_bf16: dweight", dw);
    float *f = xmalloc(n * sizeof(float), "fp32 din");
    ops_download(f, scr.d, n * sizeof(float));
    cpu_round_to_bf16(b, f, n);
    ops_download(a, d16, n * sizeof(uint16_t));
    same = bf16_compare(a, b, n, &ulp);
    CHECK(same == n, "fp32 matmul_backward_from_bf16_to_bf16 (%dx%dx%d): din16 its scratch rounded, %zu of %zu bits "
          "equal", N, in, out, same, n);
    buf_free(x16), buf_free(d16), buf_free(r16);
    free(a), free(b), free(ga), free(gb), free(f);
    pair_free(dy), pair_free(w), pair_free(x), pair_free(dx), pair_free(scr), pair_free(xs), pair_free(dw),
        pair_free(dw2);
}

// matmul_backward_bf16_to_bf16 (the down and o products on the residual stream's
// gradient as a norm's backward wrote it in bf16): the same bits as
// matmul_backward_from_bf16_to_bf16 on the fp32 gradient it was rounded from (the
// same operand), both gradients in one call, and each alone (down's two calls).
static void test_matmul_bf16_to_bf16(int N, int in, int out) {
    const size_t nx = (size_t)N * in, nw = (size_t)out * in;
    Pair dy = pair_fill((size_t)N * out, 1.0f), w = pair_fill(nw, 0.1f), x = pair_fill(nx, 1.0f);
    Pair xs = pair_fill(nx, 1.0f), dw = pair_fill(nw, 1.0f), dw2 = pair_fill(nw, 1.0f), dw3 = pair_fill(nw, 1.0f);
    uint16_t *dy16 = bf16_twin(dy, "bf16 output gradient"), *x16 = bf16_twin(x, "bf16 input");  // dy, x widened
    copy_f32(dw2.d, dw.d, nw), copy_f32(dw3.d, dw.d, nw);  // dweight accumulates: all from the same values
    uint16_t *d16[3];
    for (int k = 0; k < 3; k++) d16[k] = buf_alloc(MEM_ACTIVATIONS, nx * sizeof(uint16_t), "bf16 din");  // (N, in)
    uint16_t *h16[3];
    for (int k = 0; k < 3; k++) h16[k] = xmalloc(nx * sizeof(uint16_t), "bf16 din");
    float *g[3];
    for (int k = 0; k < 3; k++) g[k] = xmalloc(nw * sizeof(float), "dw");
    ops_set_matmul_bf16(1);
    matmul_backward_from_bf16_to_bf16(d16[0], NULL, dw.d, dy.d, x16, xs.d, w.d, N, in, out);
    matmul_backward_bf16_to_bf16(d16[1], NULL, dw2.d, dy16, x16, w.d, N, in, out);
    matmul_backward_bf16_to_bf16(d16[2], NULL, NULL, dy16, NULL, w.d, N, in, out);
    matmul_backward_bf16_to_bf16(NULL, NULL, dw3.d, dy16, x16, w.d, N, in, out);
    const Pair *dws[3] = {&dw, &dw2, &dw3};
    for (int k = 0; k < 3; k++) {
        ops_download(h16[k], d16[k], nx * sizeof(uint16_t));
        ops_download(g[k], dws[k]->d, nw * sizeof(float));
    }
    CHECK(!memcmp(h16[0], h16[1], nx * sizeof(uint16_t)) && !memcmp(g[0], g[1], nw * sizeof(float)),
          "bf16 matmul_backward_bf16_to_bf16 (%dx%dx%d) = matmul_backward_from_bf16_to_bf16 on the fp32 gradient it "
          "rounds from: din16 and dweight bit for bit", N, in, out);
    CHECK(!memcmp(h16[0], h16[2], nx * sizeof(uint16_t)) && !memcmp(g[0], g[2], nw * sizeof(float)),
          "bf16 matmul_backward_bf16_to_bf16 (%dx%dx%d): din16 alone and dweight alone, the same bits", N, in, out);
    ops_set_matmul_bf16(0);
    for (int k = 0; k < 3; k++) buf_free(d16[k]), free(h16[k]), free(g[k]);
    buf_free(dy16), buf_free(x16);
    pair_free(dy), pair_free(w), pair_free(x), pair_free(xs), pair_free(dw), pair_free(dw2), pair_free(dw3);
}

// matmul_backward_bf16 (a bf16 run's gate|up and q|k|v backward): the output
// gradient and the input kept as bf16, handed to cuBLASLt as the operands
// matmul_backward would round the widened values to, so with bf16 products the
// same bits as matmul_backward of the widened values, whether din and dweight
// come from one call or two (the tensor-parallel layer asks for them apart), the
// scratches untouched (an out_dim that is not a multiple of 8 through the padded
// copy). Against the CPU within TOL; with fp32 products (both widened into their
// scratches, the input in place in its own buffer) too.
static void test_matmul_backward_bf16(int N, int in, int out) {
    const size_t nx = (size_t)N * in, ny = (size_t)N * out, nw = (size_t)out * in;
    Pair x = pair_fill(nx, 1.0f), w = pair_fill(nw, 0.1f), dy = pair_fill(ny, 1.0f), scr = pair_fill(ny, 1.0f);
    Pair dx = pair_fill(nx, 1.0f), dx2 = pair_fill(nx, 1.0f), dx3 = pair_fill(nx, 1.0f);
    Pair dw = pair_fill(nw, 1.0f), dw2 = pair_fill(nw, 1.0f), dw3 = pair_fill(nw, 1.0f);
    Pair xs = pair_fill(nx, 1.0f), room = pair_fill(nx, 1.0f);
    uint16_t *dy16_d = bf16_twin(dy, "bf16 output gradient");  // (N, out); dy: the widened gradient on both sides
    uint16_t *x16_d = bf16_twin(x, "bf16 input");  // (N, in); x: the widened input on both sides
    copy_f32(dw2.d, dw.d, nw);  // dweight accumulates: all start from the same values
    copy_f32(dw3.d, dw.d, nw);
    float *a = xmalloc(nx * sizeof(float), "din"), *b = xmalloc(nx * sizeof(float), "din");
    float *c = xmalloc(nx * sizeof(float), "din"), *ga = xmalloc(nw * sizeof(float), "dw");
    float *gb = xmalloc(nw * sizeof(float), "dw"), *gc = xmalloc(nw * sizeof(float), "dw");
    ops_set_matmul_bf16(1);
    for (int r = 0; r < 2; r++) {  // din overwritten, then accumulated
        matmul_backward_bf16(dx.d, dw.d, dy16_d, scr.d, x16_d, xs.d, w.d, N, in, out, r);
        matmul_backward(dx2.d, dw2.d, dy.d, x.d, w.d, N, in, out, r);
        matmul_backward_bf16(dx3.d, NULL, dy16_d, scr.d, NULL, NULL, w.d, N, in, out, r);
        matmul_backward_bf16(NULL, dw3.d, dy16_d, scr.d, x16_d, xs.d, NULL, N, in, out, r);
    }
    ops_download(a, dx.d, nx * sizeof(float)), ops_download(b, dx2.d, nx * sizeof(float));
    ops_download(c, dx3.d, nx * sizeof(float)), ops_download(ga, dw.d, nw * sizeof(float));
    ops_download(gb, dw2.d, nw * sizeof(float)), ops_download(gc, dw3.d, nw * sizeof(float));
    CHECK(!memcmp(a, b, nx * sizeof(float)) && !memcmp(ga, gb, nw * sizeof(float)),
          "bf16 matmul_backward_bf16 (%dx%dx%d) = matmul_backward of the widened gradient and input (din, dweight), "
          "bit for bit", N, in, out);
    CHECK(!memcmp(a, c, nx * sizeof(float)) && !memcmp(ga, gc, nw * sizeof(float)),
          "bf16 matmul_backward_bf16 (%dx%dx%d): din and dweight asked for apart, the same bits", N, in, out);
    CHECK(pair_diff(scr) == 0.0 && pair_diff(xs) == 0.0, "bf16 matmul_backward_bf16 (out %d) leaves its scratches alone",
          out);
    float *wr = rounded_copy(w);
    for (int r = 0; r < 2; r++) cpu_matmul_backward(dx.h, dw.h, dy.h, x.h, wr, N, in, out, r);
    expect_close("bf16 matmul_backward_bf16 din vs the CPU", dx);
    expect_close("bf16 matmul_backward_bf16 dweight vs the CPU", dw);
    ops_set_matmul_bf16(0);
    ops_download(dw3.h, dw3.d, nw * sizeof(float));  // dweight accumulates onto what the GPU holds
    uint16_t *x16_h = xmalloc(nx * sizeof(uint16_t), "bf16 input");
    ops_download(x16_h, x16_d, nx * sizeof(uint16_t));
    for (int r = 0; r < 2; r++) {
        ops_upload(room.d, x16_h, nx * sizeof(uint16_t));  // the input at the start of its own room, widened there
        matmul_backward_bf16(dx3.d, dw3.d, dy16_d, scr.d, (uint16_t *)room.d, room.d, w.d, N, in, out, r);
        cpu_matmul_backward(dx3.h, dw3.h, dy.h, x.h, w.h, N, in, out, r);
    }
    expect_close("fp32 matmul_backward_bf16 din vs the CPU", dx3);
    expect_close("fp32 matmul_backward_bf16 dweight vs the CPU (input in place)", dw3);
    buf_free(dy16_d), buf_free(x16_d);
    free(a), free(b), free(c), free(ga), free(gb), free(gc), free(wr), free(x16_h);
    pair_free(x), pair_free(w), pair_free(dy), pair_free(scr), pair_free(dx), pair_free(dx2), pair_free(dx3),
        pair_free(dw), pair_free(dw2), pair_free(dw3), pair_free(xs), pair_free(room);
}

#endif
