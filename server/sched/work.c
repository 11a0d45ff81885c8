/* work.c - a request's expected work, from attn_cost_flops (work.h). */
#include "server/sched/work.h"

#include "core/attn.h"

/* Nanoseconds per number printed in a JSON answer, and per byte of a
 * binary output copied. */
#define WORK_TEXT_NS 60.0
#define WORK_BINARY_NS 0.25

double work_flops(const proto_request *r) {
  return attn_cost_flops(&r->prob, r->return_weights || r->diagnostics,
                         r->diagnostics);
}

double work_compute_ns(double flops) { return flops / WORK_FLOPS_PER_NS; }

double work_ns(const proto_request *r, double flops) {
  size_t text, binary;
  proto_answer_work(r, &text, &binary);
  return work_compute_ns(flops) + (double)text * WORK_TEXT_NS +
         (double)binary * WORK_BINARY_NS;
}
