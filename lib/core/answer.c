/* A query's answer: its arrays (kvix/answer.h). */
#include "kvix/answer.h"

#include <stdlib.h>
#include <string.h>

void kvix_answer_init(kvix_answer *ans)
{
    memset(ans, 0, sizeof *ans);
}

void kvix_answer_release(kvix_answer *ans)
{
    free(ans->scores_buf);
    free(ans->scratch);
    free(ans->hits);
    free(ans->hit_runs);
    free(ans->hit_tiers);
    free(ans->rank_buf);
    kvix_answer_init(ans);
}

void kvix_explain_init(kvix_explain *x)
{
    memset(x, 0, sizeof *x);
    kvix_answer_init(&x->full);
}

void kvix_explain_release(kvix_explain *x)
{
    free(x->scratch);
    kvix_answer_release(&x->full);
    kvix_explain_init(x);
}
