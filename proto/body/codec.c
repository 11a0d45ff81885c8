/* codec.c - an answer in the codec its request came in (proto_encode):
 * above both codecs, so that neither calls the other. */
#include "proto/proto.h"

int proto_encode(const proto_request *req, char **body, size_t *len,
                 size_t *json_len) {
  if (req->codec == PROTO_CODEC_V2)
    return proto_v2_encode(req, body, len, json_len);
  int rc = proto_v1_encode(req, body, len);
  if (!rc)
    *json_len = *len;
  return rc;
}
