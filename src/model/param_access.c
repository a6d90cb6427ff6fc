// model/param_access.c — ParamAccess over whole buffers (param_access.h).
#include "model/param_access.h"

static const float *whole_params(void *ctx, int unit) {
    WholeBuffers *wb = ctx;
    return wb->params + wb->model->unit_lo[unit];
}

static float *whole_grads(void *ctx, int unit) {
    WholeBuffers *wb = ctx;
    return wb->grads + wb->model->unit_lo[unit];
}

static void whole_nothing(void *ctx, int unit) {  // nothing to release or reduce
    (void)ctx;
    (void)unit;
}

ParamAccess param_access_whole(WholeBuffers *wb) {
    ParamAccess pa = {wb, whole_params, whole_nothing, whole_grads, whole_nothing};
    return pa;
}
