/* libkvix private: event copies for the library's own queues. */
#ifndef KVIX_EVENT_INT_H
#define KVIX_EVENT_INT_H

#include "kvix/event.h"

/* kvix_event_copy without the forensic tokens (dst gets none): the index
 * never reads them, and they may be far bigger than the rest. dst's
 * buffers are reused and grown as kvix_event_copy does. */
int kvix__ev_copy_untokened(kvix_event *dst, const kvix_event *src, kvix_err *err);

#endif
