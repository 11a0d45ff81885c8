/* support_jobs.h - requests and their expected answers, for the unit
 * tests of the batcher and of job execution.
 *
 * SUPPORT_SHAPE_A is a small /v1 request with a mask and weights.
 * support_expected_body(json, &len) decodes json with proto_v1_decode,
 * runs attn_forward and encodes the answer with proto_v1_encode: what a
 * job of that request should answer.  support_large_request(weights)
 * builds a (1, SUPPORT_LARGE_L, 16) /v1 request (1024 x 1024 x 32
 * multiply-adds: several milliseconds, long enough for idle workers to
 * wake and help even on a loaded machine), with or without weights.  Both
 * return malloc'd strings the caller frees; a failure aborts the test.
 * support_counter(m, name) reads an unlabelled counter off m's text
 * exposition (metrics_render), as a scrape would;
 * support_counter_labelled one sample of a labelled one. */
#ifndef ATTND_TESTS_SUPPORT_JOBS_H
#define ATTND_TESTS_SUPPORT_JOBS_H

#include <stddef.h>

#define SUPPORT_LARGE_L 1024

#define SUPPORT_SHAPE_A                                                    \
  "{\"query\": [[[1, 0], [0, 2]]], \"key\": [[[1, 1], [2, 0], [0, 3]]],"  \
  " \"value\": [[[1, 0], [0, 1], [1, 1]]], \"valid_lens\": [2],"           \
  " \"scale\": 0.7071, \"return_weights\": true}"

char *support_expected_body(const char *json, size_t *len);
char *support_large_request(int weights);

struct metrics;
unsigned long long support_counter(struct metrics *m, const char *name);
/* The same for the sample name{labels} (labels as rendered: a="b"). */
unsigned long long support_counter_labelled(struct metrics *m,
                                            const char *name,
                                            const char *labels);

#endif
