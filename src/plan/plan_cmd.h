// plan/plan_cmd.h — `femtotron plan`: ranked layouts for a model on a cluster.
#ifndef FEMTOTRON_PLAN_CMD_H
#define FEMTOTRON_PLAN_CMD_H

#include "config.h"
#include "plan/plan.h"

int plan_main(int argc, char **argv);

// Parse "dp=2,tp=2,pp=2,cp=1,zero=1,sp=1,mbs=1,sched=1f1b,v=1,recompute=none"
// into l (keys not given keep their value in l); dies naming a bad key.
void plan_parse_layout(PlanLayout *l, const char *text);

#endif
