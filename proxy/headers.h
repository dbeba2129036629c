#pragma once
// Header hygiene between client and upstream, one header per job:
//   hop_by_hop.h   which fields are end-to-end and copied, which belong to
//                  one connection and are dropped (RFC 9110 section 7.6.1)
//   forwarding.h   X-Forwarded-For, X-Forwarded-Proto and Forwarded
//   request_id.h   X-Request-Id: the client's when valid, else a new one
//   framing.h      how a response to the client is delimited
//   head_writer.h  the upstream request's head and the client response's
//                  head, as a Beast message or as bytes
// Framing (Content-Length, Transfer-Encoding) is never copied: fencegate
// re-frames every message. Callers include this header for all of them.

#include "proxy/forwarding.h"
#include "proxy/framing.h"
#include "proxy/head_writer.h"
#include "proxy/hop_by_hop.h"
#include "proxy/request_id.h"
