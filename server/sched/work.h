/* work.h - what a request is expected to take, in the one model attnd has.
 *
 * What a request costs is one of three quantities in server/, each named
 * by its unit (no name says "cost" alone):
 *   flops       the work of computing a request, attn_cost_flops (core/):
 *               what --max-request-gflop limits and
 *               attnd_request_cost_gflop shows;
 *   hold_bytes  the memory a request holds against --max-inflight-mb
 *               from admission until it is computed (batcher_reserve,
 *               job->hold_bytes; then its answer's bytes alone,
 *               job->answer_bytes, until the answer is sent);
 *   ns          the time it is expected to take on one core: its flops at
 *               WORK_FLOPS_PER_NS plus encoding its answer, what the
 *               inline bounds (--inline-us, --inline-idle-us) and the
 *               split across idle workers compare with.
 * Every time estimate comes from work_ns or work_compute_ns, and every one
 * of them from attn_cost_flops, so admission, the inline decision and the
 * split cannot disagree about which request is the bigger.
 *
 * Pure functions of the request; any thread.
 */
#ifndef ATTND_WORK_H
#define ATTND_WORK_H

#include "proto/proto.h"

/* Flop-equivalents a core does per nanosecond, on the conservative side:
 * half of the rate attn_cost_flops is calibrated at (docs/api.md, "Cost
 * limit"), for a core that is shared or has no AVX-512. */
#define WORK_FLOPS_PER_NS 50.0

/* Computing time beyond which idle workers help with one request: below
 * it the hand-offs cost about what they would save. */
#define WORK_SPLIT_NS 200000.0

/* Chunks of tasks per worker when one request is split (server/sched/
 * exec.c), so that the worker that finishes last waits at most one
 * small chunk for the others; attnd-bench split runs the same split. */
#define WORK_SPLIT_CHUNKS 16

/* attn_cost_flops of the request as it will run: with weights when it
 * returns them or asks for the diagnostics (which need them). */
double work_flops(const proto_request *r);

/* Nanoseconds of computing flops on one core. */
double work_compute_ns(double flops);

/* Nanoseconds the whole request is expected to take on one core: its
 * computing (flops, its work_flops), then its answer: every number of a
 * JSON answer printed at about 60 ns, binary outputs copied at 4 GB/s
 * (proto_answer_work). */
double work_ns(const proto_request *r, double flops);

#endif /* ATTND_WORK_H */
