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
