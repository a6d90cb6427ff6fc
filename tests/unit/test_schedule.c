// tests/unit/test_schedule.c — the learning-rate schedules (train/schedule.h) at
// points worked out by hand from their published definitions, and the resume rule:
// a resumed run may not give the steps already taken another rate.
#include <string.h>

#include "check.h"
#include "config.h"
#include "run_child.h"
#include "train/schedule.h"

// T = 100 steps, W = 10 warmup steps from init_lr 0.01 to lr 1, min_lr 0.1.
static TrainingConfig base(LrSchedule s) {
    Config c;
    config_defaults(&c);
    TrainingConfig t = c.training;
    t.steps = 100;
    t.warmup_steps = 10;
    t.lr = 1.0;
    t.min_lr = 0.1;
    t.init_lr = 0.01;
    t.lr_schedule = s;
    return t;
}

#define NEAR(a, b) (fabs((a) - (b)) < 1e-12)

static void test_values(void) {
    TrainingConfig t = base(LR_COSINE);
    CHECK(NEAR(lr_at_step(&t, 5), 0.505) && NEAR(lr_at_step(&t, 10), 1.0),
          "warmup from init_lr: step 5 of 10 gives 0.01 + 0.99 / 2 = 0.505, step 10 gives lr");
    CHECK(NEAR(lr_at_step(&t, 55), 0.55) && NEAR(lr_at_step(&t, 100), 0.1),
          "cosine: halfway (step 55) 0.1 + 0.9 / 2 = 0.55, the last step min_lr");
    t = base(LR_LINEAR);
    CHECK(NEAR(lr_at_step(&t, 28), 0.82) && NEAR(lr_at_step(&t, 100), 0.1),
          "linear: step 28 (p = 0.2) 1 - 0.9 * 0.2 = 0.82, the last step min_lr (%.6g, %.6g)",
          lr_at_step(&t, 28), lr_at_step(&t, 100));
    t = base(LR_CONSTANT);
    CHECK(NEAR(lr_at_step(&t, 11), 1.0) && NEAR(lr_at_step(&t, 100), 1.0), "constant: lr after warmup");
    t = base(LR_WSD);
    t.decay_steps = 20;  // decay over steps 81..100
    CHECK(NEAR(lr_at_step(&t, 50), 1.0) && NEAR(lr_at_step(&t, 80), 1.0) && NEAR(lr_at_step(&t, 90), 0.55) &&
              NEAR(lr_at_step(&t, 100), 0.1),
          "wsd linear, 20 decay steps: stable through step 80, 0.55 at step 90, min_lr at 100");
    t.decay_shape = DECAY_COSINE;
    CHECK(NEAR(lr_at_step(&t, 90), 0.55) && NEAR(lr_at_step(&t, 85), 0.1 + 0.45 * (1 + sqrt(0.5))),
          "wsd cosine: 0.55 halfway, 0.1 + 0.45 (1 + cos(pi/4)) a quarter in");
    t.decay_shape = DECAY_1_SQRT;
    CHECK(NEAR(lr_at_step(&t, 85), 0.55) && NEAR(lr_at_step(&t, 100), 0.1),
          "wsd 1-sqrt: a quarter in (q = 0.25) 0.1 + 0.9 (1 - 0.5) = 0.55, min_lr at the end");
    t.decay_steps = 0;
    t.decay_fraction = 0.2;
    t.decay_shape = DECAY_LINEAR;
    CHECK(training_decay_steps(&t) == 20 && NEAR(lr_at_step(&t, 90), 0.55), "wsd: decay_fraction 0.2 of 100 steps = 20 steps");
    // The default schedule is the one femtotron always had: lr * s / W, then cosine.
    Config c;
    config_defaults(&c);
    TrainingConfig d = c.training;
    CHECK(lr_at_step(&d, 3) == d.lr * 3 / d.warmup_steps && d.lr_schedule == LR_COSINE && d.init_lr == 0,
          "defaults: cosine, warmup from 0 (lr * s / W exactly)");
}

typedef struct {
    TrainingConfig old, now;
    int done;
} Resume;

static void resume_child(void *ctx) {
    Resume *r = ctx;
    lr_check_resume(&r->old, &r->now, r->done);
}

static void test_resume(void) {
    char err[2048];
    Resume r = {base(LR_COSINE), base(LR_COSINE), 50};
    r.now.steps = 200;
    int rc = run_child(resume_child, &r, err, sizeof err);
    CHECK(rc != 0 && strstr(err, "step 11") && strstr(err, "lr_schedule cosine, steps 100") &&
              strstr(err, "steps 200"),
          "cosine, training.steps 100 -> 200 at step 50: refused, naming step 11 (exit %d: %.200s)", rc, err);
    r.done = 10;  // still in the warmup: nothing taken differs
    CHECK(run_child(resume_child, &r, err, sizeof err) == 0, "cosine, steps changed during the warmup: accepted");
    r = (Resume){base(LR_WSD), base(LR_WSD), 50};
    r.old.decay_steps = r.now.decay_steps = 20;
    r.now.steps = 200;  // stable phase extended: the decay moves to steps 181..200
    CHECK(run_child(resume_child, &r, err, sizeof err) == 0, "wsd in its stable phase (step 50 of 100): extended to 200");
    r.done = 90;  // the decay had begun at step 81
    rc = run_child(resume_child, &r, err, sizeof err);
    CHECK(rc != 0 && strstr(err, "step 81"), "wsd after its decay began (step 90): extending is refused at step 81 (%.120s)",
          err);
    r = (Resume){base(LR_CONSTANT), base(LR_CONSTANT), 60};
    r.now.steps = 500;
    CHECK(run_child(resume_child, &r, err, sizeof err) == 0, "constant: any training.steps");
    r = (Resume){base(LR_COSINE), base(LR_COSINE), 40};
    r.now.lr = 2.0;
    CHECK(run_child(resume_child, &r, err, sizeof err) != 0, "a changed training.lr is refused too");
}

int main(void) {
    test_values();
    test_resume();
    return check_summary();
}
