// tests/fuzz/fuzz_tokens.c — an llm.c token shard: tokens_open (header, size, every
// id against the vocabulary) and batches read from it, shuffled or not.
#include "fuzz.h"

#include "data/tokens.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    const char *path = fuzz_file("train_000000.bin", data, n);
    const int S = 8, shuffle = n > 0 && (data[n - 1] & 1);
    FUZZ_TRY({
        TokenDataset ds;
        tokens_open(&ds, path, S, 300, shuffle, 1234);
        int32_t in[4 * 8], tg[4 * 8];  // (B*S)
        tokens_fill_batch(&ds, 0, 4, in, tg);
        tokens_fill_batch(&ds, ds.n_seq * 2 + 3, 4, in, tg);  // past an epoch boundary
        tokens_close(&ds);
    });
    return 0;
}
