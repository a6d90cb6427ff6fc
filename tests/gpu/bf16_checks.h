// tests/gpu/bf16_checks.h — gpu_ops.c's checks of bf16 products
// (ops_set_matmul_bf16(1), training.precision = bf16): the matrix products and the
// tensor-core attention (ops/flash_attention.cuh). Included once, by gpu_ops.c,
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

// The bf16 copy of the weights (ops_keep_bf16_weights): a product whose weight
// lies in the kept arena reads its bf16 copy, rounded once per generation. So the
// product equals the CPU's product of the rounded operands (exact, as above); new
// weights written without ops_bf16_weights_changed() are not seen (the copy is
// kept: the trainer says "changed" before every step and validation), and after
// it they are; the backward's din reads the copy too.
static void test_kept_weights(void) {
    const int N = 24, in = 64, out = 48;
    const size_t off = 40, nw = (size_t)out * in, n = off + nw + 16;  // the weight inside the arena
    Pair arena = pair_fill(n, 0.1f), x = pair_fill((size_t)N * in, 1.0f), y = pair_fill((size_t)N * out, 1.0f);
    Pair dy = pair_fill((size_t)N * out, 1.0f), dx = pair_fill((size_t)N * in, 1.0f), dw = pair_fill(nw, 1.0f);
    void *copy = buf_alloc(MEM_PARAMS, 2 * n, "bf16 weight copy");
    float *xr = rounded_copy(x), *dyr = rounded_copy(dy), *old_wr = rounded_range(arena.h + off, nw);
    const float *w = arena.d + off;
    ops_set_matmul_bf16(1);
    ops_keep_bf16_weights(arena.d, n, copy);
    matmul_forward(y.d, x.d, w, N, in, out);
    cpu_matmul_forward(y.h, xr, old_wr, N, in, out);
    expect_close("kept bf16 weights: matmul_forward", y);
    for (size_t i = 0; i < n; i++) arena.h[i] = urand() * 0.1f;  // new weights, nobody says so
    ops_upload(arena.d, arena.h, n * sizeof(float));
    float *new_wr = rounded_range(arena.h + off, nw);
    matmul_forward(y.d, x.d, w, N, in, out);
    expect_close("kept bf16 weights: new weights unseen until ops_bf16_weights_changed", y);
    ops_bf16_weights_changed();
    matmul_forward(y.d, x.d, w, N, in, out);
    cpu_matmul_forward(y.h, xr, new_wr, N, in, out);
    expect_close("kept bf16 weights: seen after ops_bf16_weights_changed", y);
    matmul_backward(dx.d, dw.d, dy.d, x.d, w, N, in, out, 0);
    cpu_matmul_backward(dx.h, dw.h, dyr, xr, new_wr, N, in, out, 0);
    expect_close("kept bf16 weights: matmul_backward din", dx);
    expect_close("kept bf16 weights: matmul_backward dweight", dw);
    ops_keep_bf16_weights(NULL, 0, NULL);
    ops_set_matmul_bf16(0);
    free(xr), free(dyr), free(old_wr), free(new_wr);
    buf_free(copy);
    pair_free(arena), pair_free(x), pair_free(y), pair_free(dy), pair_free(dx), pair_free(dw);
}

// AdamW writes the kept copy (issue 21): right after an update of a weight in the
// arena, the copy's slice holds the updated weight rounded to bf16, bit for bit
// (without the write it would still hold the old weight's rounding), and after
// ops_bf16_weights_changed the product reads it: the CPU's product of the rounded
// updated weights. An update of half the weight, after the weights were written
// by the host (a load), leaves the other half of the copy stale: the product must
// then round the whole weight again, not take the half-written copy as fresh.
static void test_adamw_writes_copy(void) {
    const int N = 16, in = 32, out = 24;
    const size_t off = 8, nw = (size_t)out * in, n = off + nw + 8;  // the weight inside the arena
    Pair arena = pair_fill(n, 0.1f), x = pair_fill((size_t)N * in, 1.0f), y = pair_fill((size_t)N * out, 1.0f);
    Pair g = pair_fill(nw, 1.0f), m = pair_fill(nw, 0.0f), v = pair_fill(nw, 0.0f);
    void *copy = buf_alloc(MEM_PARAMS, 2 * n, "bf16 weight copy");
    float *xr = rounded_copy(x), *w_h = xmalloc(nw * sizeof(float), "updated weight");  // (nw)
    uint16_t *c_h = xmalloc(nw * sizeof(uint16_t), "downloaded copy");                    // (nw)
    float *w = arena.d + off;
    ops_set_matmul_bf16(1);
    ops_keep_bf16_weights(arena.d, n, copy);
    matmul_forward(y.d, x.d, w, N, in, out);  // rounds the weight into the copy
    adamw_update(w, g.d, m.d, v.d, nw, 1.0f, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 1);
    ops_download(w_h, w, nw * sizeof(float));
    ops_download(c_h, (uint16_t *)copy + off, nw * sizeof(uint16_t));
    size_t same = 0;
    for (size_t i = 0; i < nw; i++) same += c_h[i] == bf16_from_f32(w_h[i]);
    CHECK(same == nw, "adamw_update writes the kept bf16 copy: %zu of %zu values are the updated weights rounded",
          same, nw);
    ops_bf16_weights_changed();
    float *wr = rounded_range(w_h, nw);
    matmul_forward(y.d, x.d, w, N, in, out);
    cpu_matmul_forward(y.h, xr, wr, N, in, out);
    expect_close("kept bf16 weights: the product reads the copy AdamW wrote", y);
    free(wr);
    for (size_t i = 0; i < n; i++) arena.h[i] = urand() * 0.1f;  // a load: new weights everywhere
    ops_upload(arena.d, arena.h, n * sizeof(float));
    ops_bf16_weights_changed();
    adamw_update(w, g.d, m.d, v.d, nw / 2, 1.0f, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 2);  // half the weight
    ops_bf16_weights_changed();
    ops_download(w_h, w, nw * sizeof(float));
    wr = rounded_range(w_h, nw);
    matmul_forward(y.d, x.d, w, N, in, out);
    cpu_matmul_forward(y.h, xr, wr, N, in, out);
    expect_close("kept bf16 weights: half a weight updated by AdamW, the whole weight rounded again", y);
    ops_keep_bf16_weights(NULL, 0, NULL);
    ops_set_matmul_bf16(0);
    free(wr), free(xr), free(w_h), free(c_h);
    buf_free(copy);
    pair_free(arena), pair_free(x), pair_free(y), pair_free(g), pair_free(m), pair_free(v);
}

// Attention with bf16 products: the tensor-core kernels round Q, K, V, dO, P and
// dS to bf16 and keep the softmax and every sum in fp32. Against the CPU's fp32
// attention on the same (unrounded) inputs they differ by the bf16 rounding: the
// same kernels run on CPU threads (tests/emu/test_flash_emu.cpp) differ from an
// fp64 attention of the unrounded inputs by at most 5.7e-3 (max-norm, relative to
// the largest value, over four shapes), so BF16_ATT_TOL = 2e-2 leaves 3.5x room;
// an indexing or mask error moves whole rows, O(0.1) and more. The rounding must
// show (the tensor-core path ran: more than 1e-4 from the GPU's fp32 kernels), and
// two runs must give the same bits (no atomics).
#define BF16_ATT_TOL 2e-2

static void expect_bf16_close(const char *what, Pair p) {
    double e = pair_diff(p);
    CHECK(e <= BF16_ATT_TOL, "%-44s rel. max-norm %.2e <= %.0e (%zu values)", what, e, BF16_ATT_TOL, p.n);
}

static int same_bits(const float *dev, size_t n, const float *before) {  // the buffer still holds `before`
    float *now = xmalloc((n ? n : 1) * sizeof(float), "bf16 attention rerun");
    ops_download(now, dev, n * sizeof(float));
    int same = !memcmp(now, before, n * sizeof(float));
    free(now);
    return same;
}

// Positions 0 .. S-1 in a planned buffer (returned) and on the host (*host).
static int *causal_positions(int S, int **host) {
    *host = xmalloc(S * sizeof(int), "pos");
    for (int p = 0; p < S; p++) (*host)[p] = p;
    int *pos = buf_alloc(MEM_ACTIVATIONS, S * sizeof(int), "gpu pos");
    ops_upload(pos, *host, S * sizeof(int));
    return pos;
}

// `kernel` is FEMTOTRON_ATTENTION's value for the run (ops/attention_cuda.cu): mma
// (ops/flash_mma.cuh) or wmma (ops/flash_attention.cuh); each is checked here.
static void test_attention_bf16(int hd, const char *kernel) {
    const int B = 2, S = 150, H = 4, KV = 2, ld = (H + 2 * KV) * hd;
    char what[96];
    setenv("FEMTOTRON_ATTENTION", kernel, 1);
    float *scratch = xmalloc((cpu_attention_scratch_floats(hd) + 1) * sizeof(float), "cpu attention scratch");
    int *pos_h, *pos = causal_positions(S, &pos_h);
    Pair qkv = pair_fill((size_t)B * S * ld, 1.5f), out = pair_fill((size_t)B * S * H * hd, 1.0f);
    Pair lse = pair_fill((size_t)B * H * S, 1.0f), m = pair_fill(lse.n, 1.0f), l = pair_fill(lse.n, 1.0f);
    Pair dout = pair_fill(out.n, 1.0f), dqkv = pair_fill(qkv.n, 1.0f), rowdot = pair_fill(lse.n, 1.0f);
    float *fp32_out = xmalloc(out.n * sizeof(float), "fp32 attention out");

    attention_forward(out.d, lse.d, m.d, l.d, qkv.d, pos, B, S, H, KV, hd, NULL);  // fp32 kernels first
    ops_download(fp32_out, out.d, out.n * sizeof(float));
    ops_set_matmul_bf16(1);
    attention_forward(out.d, lse.d, m.d, l.d, qkv.d, pos, B, S, H, KV, hd, NULL);
    cpu_attention_forward(out.h, lse.h, m.h, l.h, qkv.h, pos_h, B, S, H, KV, hd, scratch);
    float *gpu_out = xmalloc(out.n * sizeof(float), "bf16 attention out");
    ops_download(gpu_out, out.d, out.n * sizeof(float));
    double moved = 0.0, big = 0.0;
    for (size_t i = 0; i < out.n; i++) {
        moved = fmax(moved, fabs((double)gpu_out[i] - fp32_out[i]));
        big = fmax(big, fabs((double)fp32_out[i]));
    }
    CHECK(moved > 1e-4 * big, "bf16 attention (%s, hd %d) differs from the fp32 kernels' (rel. %.2e > 1e-4): tensor cores ran",
          kernel, hd, moved / big);
    snprintf(what, sizeof what, "bf16 attention_forward out (%s, hd %d)", kernel, hd);
    expect_bf16_close(what, out);
    snprintf(what, sizeof what, "bf16 attention_forward lse (%s, hd %d)", kernel, hd);
    expect_bf16_close(what, lse);
    attention_backward(dqkv.d, rowdot.d, dout.d, qkv.d, out.d, lse.d, pos, B, S, H, KV, hd, NULL);
    cpu_attention_backward(dqkv.h, rowdot.h, dout.h, qkv.h, out.h, lse.h, pos_h, B, S, H, KV, hd, scratch);
    snprintf(what, sizeof what, "bf16 attention_backward dqkv (%s, hd %d)", kernel, hd);
    expect_bf16_close(what, dqkv);
    float *first = xmalloc(dqkv.n * sizeof(float), "first dqkv");
    ops_download(first, dqkv.d, dqkv.n * sizeof(float));
    attention_forward(out.d, lse.d, m.d, l.d, qkv.d, pos, B, S, H, KV, hd, NULL);
    attention_backward(dqkv.d, rowdot.d, dout.d, qkv.d, out.d, lse.d, pos, B, S, H, KV, hd, NULL);
    CHECK(same_bits(out.d, out.n, gpu_out) && same_bits(dqkv.d, dqkv.n, first),
          "bf16 attention (%s, hd %d) twice: out and dqkv bit-identical", kernel, hd);

    // Ring steps: queries at 40..189 against keys at 0..69 in their own buffer
    // (Sk != Sq; every query sees some of them), then keys at 150..199 (rows
    // before position 150 see none of them: fully masked).
    const int Sk = 70, Sk2 = 50, ldkv = 2 * KV * hd;
    int qpos[150], kpos[70], kpos2[50];
    for (int p = 0; p < S; p++) qpos[p] = 40 + p;
    for (int p = 0; p < Sk; p++) kpos[p] = p;
    for (int p = 0; p < Sk2; p++) kpos2[p] = 150 + p;
    Pair kv = pair_fill((size_t)B * Sk * ldkv, 1.5f), kv2 = pair_fill((size_t)B * Sk2 * ldkv, 1.5f);
    Pair dkv = pair_fill(kv.n, 1.0f), dkv2 = pair_fill(kv2.n, 1.0f), dq = pair_fill(qkv.n, 1.0f);
    attention_block_init(out.d, m.d, l.d, B, S, H, hd);
    cpu_attention_block_init(out.h, m.h, l.h, B, S, H, hd);
    attention_block_forward(out.d, m.d, l.d, qkv.d, ld, kv.d, ldkv, 0, KV * hd, qpos, kpos, B, S, Sk, H, KV, hd, NULL);
    cpu_attention_block_forward(out.h, m.h, l.h, qkv.h, ld, kv.h, ldkv, 0, KV * hd, qpos, kpos, B, S, Sk, H, KV, hd, scratch);
    attention_block_forward(out.d, m.d, l.d, qkv.d, ld, kv2.d, ldkv, 0, KV * hd, qpos, kpos2, B, S, Sk2, H, KV, hd, NULL);
    cpu_attention_block_forward(out.h, m.h, l.h, qkv.h, ld, kv2.h, ldkv, 0, KV * hd, qpos, kpos2, B, S, Sk2, H, KV, hd,
                                scratch);
    attention_block_finish(out.d, lse.d, m.d, l.d, B, S, H, hd);
    cpu_attention_block_finish(out.h, lse.h, m.h, l.h, B, S, H, hd);
    snprintf(what, sizeof what, "bf16 ring blocks out (%s, hd %d)", kernel, hd);
    expect_bf16_close(what, out);
    attention_rowdot(rowdot.d, dout.d, out.d, B, S, H, hd);
    cpu_attention_rowdot(rowdot.h, dout.h, out.h, B, S, H, hd);
    attention_block_backward(dq.d, dkv.d, qkv.d, ld, kv.d, ldkv, 0, KV * hd, dout.d, lse.d, rowdot.d, qpos, kpos, B, S,
                             Sk, H, KV, hd, NULL);
    cpu_attention_block_backward(dq.h, dkv.h, qkv.h, ld, kv.h, ldkv, 0, KV * hd, dout.h, lse.h, rowdot.h, qpos, kpos, B,
                                 S, Sk, H, KV, hd, scratch);
    attention_block_backward(dq.d, dkv2.d, qkv.d, ld, kv2.d, ldkv, 0, KV * hd, dout.d, lse.d, rowdot.d, qpos, kpos2, B,
                             S, Sk2, H, KV, hd, NULL);
    cpu_attention_block_backward(dq.h, dkv2.h, qkv.h, ld, kv2.h, ldkv, 0, KV * hd, dout.h, lse.h, rowdot.h, qpos, kpos2,
                                 B, S, Sk2, H, KV, hd, scratch);
    snprintf(what, sizeof what, "bf16 ring blocks dq (+=, %s, hd %d)", kernel, hd);
    expect_bf16_close(what, dq);
    snprintf(what, sizeof what, "bf16 ring blocks dkv, dkv2 (+=, %s, hd %d)", kernel, hd);
    double e = fmax(pair_diff(dkv), pair_diff(dkv2));
    CHECK(e <= BF16_ATT_TOL, "%-44s rel. max-norm %.2e <= %.0e", what, e, BF16_ATT_TOL);
    ops_set_matmul_bf16(0);
    unsetenv("FEMTOTRON_ATTENTION");
    free(scratch), free(pos_h), free(fp32_out), free(gpu_out), free(first);
    buf_free(pos);
    pair_free(qkv), pair_free(out), pair_free(lse), pair_free(m), pair_free(l), pair_free(dout), pair_free(dqkv);
    pair_free(rowdot), pair_free(kv), pair_free(kv2), pair_free(dkv), pair_free(dkv2), pair_free(dq);
}

// The two tensor-core families on the same problem: both ran (their bits differ:
// they round P and sum in different places) and agree within the bf16 tolerance.
static void test_attention_kernels_agree(int hd) {
    const int B = 2, S = 150, H = 4, KV = 2, ld = (H + 2 * KV) * hd;
    int *pos_h, *pos = causal_positions(S, &pos_h);
    Pair qkv = pair_fill((size_t)B * S * ld, 1.5f), out = pair_fill((size_t)B * S * H * hd, 1.0f);
    Pair lse = pair_fill((size_t)B * H * S, 1.0f), m = pair_fill(lse.n, 1.0f), l = pair_fill(lse.n, 1.0f);
    ops_set_matmul_bf16(1);
    setenv("FEMTOTRON_ATTENTION", "wmma", 1);
    attention_forward(out.d, lse.d, m.d, l.d, qkv.d, pos, B, S, H, KV, hd, NULL);
    ops_download(out.h, out.d, out.n * sizeof(float));  // the wmma result as the reference side
    setenv("FEMTOTRON_ATTENTION", "mma", 1);
    attention_forward(out.d, lse.d, m.d, l.d, qkv.d, pos, B, S, H, KV, hd, NULL);
    const double e = pair_diff(out);
    CHECK(e > 0 && e <= BF16_ATT_TOL, "attention (hd %d): the mma and wmma kernels both ran (bits differ) and agree "
          "within %.0e (%.2e)", hd, BF16_ATT_TOL, e);
    // attention_forward's one kernel (mma) against the block ops it folds in: the same bits.
    float *whole = xmalloc(out.n * sizeof(float), "whole out"), *whole_lse = xmalloc(lse.n * sizeof(float), "lse");
    ops_download(whole, out.d, out.n * sizeof(float));
    ops_download(whole_lse, lse.d, lse.n * sizeof(float));
    attention_block_init(out.d, m.d, l.d, B, S, H, hd);
    attention_block_forward(out.d, m.d, l.d, qkv.d, ld, qkv.d, ld, H * hd, (H + KV) * hd, pos, pos, B, S, S, H, KV, hd,
                            NULL);
    attention_block_finish(out.d, lse.d, m.d, l.d, B, S, H, hd);
    CHECK(same_bits(out.d, out.n, whole) && same_bits(lse.d, lse.n, whole_lse),
          "attention_forward (mma, hd %d) in one kernel: the bits of block init + forward + finish", hd);
    free(whole), free(whole_lse);
    ops_set_matmul_bf16(0);
    unsetenv("FEMTOTRON_ATTENTION");
    free(pos_h);
    buf_free(pos);
    pair_free(qkv), pair_free(out), pair_free(lse), pair_free(m), pair_free(l);
}

// bf16 activations (ops.h: a dense MLP's gate|up kept as bf16): round_to_bf16 on
// the GPU gives the CPU's bits exactly (both round to nearest, ties to even), and
// SwiGLU forward and backward reading the kept bf16 gu are within TOL of the CPU's
// (the same formula on the same widened values; expf against the CPU's fast_expf).
// At F = 130 the rows of F values do not start 8-byte aligned (the kernels take a
// value a thread), at 128 they do (4 a thread).
static void test_bf16_activations_at(int F) {
    const int N = 29;
    const size_t ngu = (size_t)N * 2 * F;
    Pair gu = pair_fill(ngu, 3.0f), d = pair_fill((size_t)N * F, 1.0f);
    Pair dgu = pair_fill(ngu, 1.0f), wide = pair_fill((size_t)N * F, 1.0f);
    const size_t no = (size_t)N * F;
    uint16_t *o16_d = buf_alloc(MEM_ACTIVATIONS, no * sizeof(uint16_t), "bf16 swiglu");  // (N, F)
    uint16_t *o16_h = xmalloc(no * sizeof(uint16_t), "bf16 swiglu"), *o16_g = xmalloc(no * sizeof(uint16_t), "bf16");
    uint16_t *g16_h = xmalloc(ngu * sizeof(uint16_t), "bf16 gu"), *back = xmalloc(ngu * sizeof(uint16_t), "bf16 gu");
    uint16_t *g16_d = buf_alloc(MEM_ACTIVATIONS, ngu * sizeof(uint16_t), "bf16 gu");  // (N, 2F)
    round_to_bf16(g16_d, gu.d, ngu);
    cpu_round_to_bf16(g16_h, gu.h, ngu);
    ops_download(back, g16_d, ngu * sizeof(uint16_t));
    size_t same = 0;
    for (size_t i = 0; i < ngu; i++) same += back[i] == g16_h[i];
    CHECK(same == ngu, "round_to_bf16: %zu of %zu values the CPU's bits", same, ngu);
    // The output rounded to bf16: the GPU's expf and the CPU's may differ in the
    // last fp32 bit, which moves a value lying on a bf16 midpoint by 1 ulp (rare).
    swiglu_forward_bf16(o16_d, g16_d, N, F);
    cpu_swiglu_forward_bf16(o16_h, g16_h, N, F);
    ops_download(o16_g, o16_d, no * sizeof(uint16_t));
    int ulp;
    same = bf16_compare(o16_g, o16_h, no, &ulp);
    CHECK(ulp <= 1 && same * 100 >= no * 99,
          "swiglu_forward_bf16, F %d: %zu of %zu the CPU's bits, at most %d ulp apart", F, same, no, ulp);
    widen_from_bf16(wide.d, o16_d, no);
    cpu_widen_from_bf16(wide.h, o16_g, no);
    CHECK(pair_diff(wide) == 0.0, "widen_from_bf16: the CPU's values exactly (rel. %.2e)", pair_diff(wide));
    // The gradient rounded to bf16 as it is written: as the forward's output.
    uint16_t *dg16_d = buf_alloc(MEM_ACTIVATIONS, ngu * sizeof(uint16_t), "bf16 dgu");  // (N, 2F)
    uint16_t *dg16_h = xmalloc(ngu * sizeof(uint16_t), "bf16 dgu"), *dg16_g = xmalloc(ngu * sizeof(uint16_t), "bf16");
    swiglu_backward_to_bf16(dg16_d, d.d, g16_d, N, F);
    cpu_swiglu_backward_to_bf16(dg16_h, d.h, g16_h, N, F);
    ops_download(dg16_g, dg16_d, ngu * sizeof(uint16_t));
    same = bf16_compare(dg16_g, dg16_h, ngu, &ulp);
    CHECK(ulp <= 1 && same * 100 >= ngu * 99,
          "swiglu_backward_to_bf16, F %d: %zu of %zu the CPU's bits, at most %d ulp apart", F, same, ngu, ulp);
    // And in fp32 terms: the 1-ulp moves allowed above (a value on a bf16 midpoint)
    // are 2^-8 of that value at most, so within 2^-8 of the largest (the inputs'
    // order of checks shifted once, and such a move showed as 7.9e-5 > 1e-5).
    widen_from_bf16(dgu.d, dg16_d, ngu);
    cpu_widen_from_bf16(dgu.h, dg16_h, ngu);
    const double wide_e = pair_diff(dgu);
    CHECK(wide_e <= 1.0 / 256, "swiglu_backward_to_bf16 (widened) rel. max-norm %.2e <= 2^-8 (%zu values)", wide_e,
          ngu);
    // swiglu_backward_bf16: dout kept as bf16 (down's input gradient), widened, so
    // the gradient is swiglu_backward_to_bf16's of the widened dout bit for bit, and
    // the SwiGLU output it rebuilds beside it is swiglu_forward_bf16's bit for bit
    // (the down product's weight gradient reads it in the forward's place); with h16
    // NULL the same gradient. Against the CPU as above.
    uint16_t *d16_d = bf16_twin(d, "bf16 dout");  // (N, F); d: its widened values
    uint16_t *h16_d = buf_alloc(MEM_ACTIVATIONS, no * sizeof(uint16_t), "rebuilt swiglu");  // (N, F)
    uint16_t *dk16_d = buf_alloc(MEM_ACTIVATIONS, ngu * sizeof(uint16_t), "bf16 dgu");      // (N, 2F)
    uint16_t *dk16_g = xmalloc(ngu * sizeof(uint16_t), "bf16"), *h16_g = xmalloc(no * sizeof(uint16_t), "bf16");
    uint16_t *d16_h = xmalloc(no * sizeof(uint16_t), "bf16 dout");
    cpu_round_to_bf16(d16_h, d.h, no);
    swiglu_backward_to_bf16(dg16_d, d.d, g16_d, N, F);
    swiglu_backward_bf16(dk16_d, h16_d, d16_d, g16_d, N, F);
    ops_download(dg16_g, dg16_d, ngu * sizeof(uint16_t));
    ops_download(dk16_g, dk16_d, ngu * sizeof(uint16_t));
    ops_download(h16_g, h16_d, no * sizeof(uint16_t));
    int fused_ok = !memcmp(dk16_g, dg16_g, ngu * sizeof(uint16_t)) && !memcmp(h16_g, o16_g, no * sizeof(uint16_t));
    swiglu_backward_bf16(dk16_d, NULL, d16_d, g16_d, N, F);
    ops_download(dk16_g, dk16_d, ngu * sizeof(uint16_t));
    fused_ok &= !memcmp(dk16_g, dg16_g, ngu * sizeof(uint16_t));
    CHECK(fused_ok, "swiglu_backward_bf16, F %d: swiglu_backward_to_bf16's bits on the widened dout, and the rebuilt "
          "output swiglu_forward_bf16's (with and without the rebuild)", F);
    cpu_swiglu_backward_bf16(dg16_h, h16_g, d16_h, g16_h, N, F);  // (h16_g: the CPU's rebuild now)
    same = bf16_compare(dk16_g, dg16_h, ngu, &ulp);
    int hulp;
    const size_t hsame = bf16_compare(h16_g, o16_h, no, &hulp);
    CHECK(ulp <= 1 && same * 100 >= ngu * 99 && hsame == no,
          "swiglu_backward_bf16 on the CPU, F %d: the GPU's within 1 ulp (%zu of %zu bits equal, at most %d ulp); its "
          "rebuild the CPU's swiglu_forward_bf16 bit for bit (%zu of %zu)", F, same, ngu, ulp, hsame, no);
    buf_free(d16_d), buf_free(h16_d), buf_free(dk16_d);
    free(dk16_g), free(h16_g), free(d16_h);
    // The norms' bf16 outputs: the GPU's fp32 row sums may differ from the CPU's in
    // the last bit (another order), which moves a value on a bf16 midpoint by 1 ulp.
    const int Nn = 21, D = 96;
    const size_t nn = (size_t)Nn * D;
    Pair nx = pair_fill(nn, 2.0f), nw = pair_fill((size_t)D, 1.0f), xh = pair_fill(nn, 1.0f), rs = pair_fill(Nn, 1.0f);
    uint16_t *n16_d = buf_alloc(MEM_ACTIVATIONS, nn * sizeof(uint16_t), "bf16 norm output");  // (Nn, D)
    uint16_t *n16_g = xmalloc(nn * sizeof(uint16_t), "bf16"), *n16_h = xmalloc(nn * sizeof(uint16_t), "bf16");
    uint16_t *b16_g = xmalloc(nn * sizeof(uint16_t), "bf16");
    rmsnorm_forward_to_bf16(n16_d, xh.d, rs.d, nx.d, nw.d, Nn, D, 1e-5f);
    cpu_rmsnorm_forward_to_bf16(n16_h, xh.h, rs.h, nx.h, nw.h, Nn, D, 1e-5f);
    ops_download(n16_g, n16_d, nn * sizeof(uint16_t));
    expect_close("rmsnorm_forward_to_bf16 xhat", xh);
    expect_close("rmsnorm_forward_to_bf16 rstd", rs);
    same = bf16_compare(n16_g, n16_h, nn, &ulp);
    rmsnorm_rebuild_to_bf16(n16_d, xh.d, nw.d, Nn, D);
    ops_download(b16_g, n16_d, nn * sizeof(uint16_t));
    CHECK(ulp <= 1 && same * 100 >= nn * 99 && !memcmp(b16_g, n16_g, nn * sizeof(uint16_t)),
          "rmsnorm_forward_to_bf16: %zu of %zu the CPU's bits, at most %d ulp apart; rmsnorm_rebuild_to_bf16 gives "
          "the forward's bits", same, nn, ulp);
    buf_free(n16_d);
    free(n16_g), free(n16_h), free(b16_g);
    pair_free(nx), pair_free(nw), pair_free(xh), pair_free(rs);
    buf_free(g16_d), buf_free(o16_d), buf_free(dg16_d);
    free(g16_h), free(back), free(o16_h), free(o16_g), free(dg16_h), free(dg16_g);
    pair_free(gu), pair_free(d), pair_free(dgu), pair_free(wide);
}

static void test_bf16_activations(void) {
    test_bf16_activations_at(130);
    test_bf16_activations_at(128);
}

#endif
