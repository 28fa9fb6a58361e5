#include "agvisor/proto/messages.h"
