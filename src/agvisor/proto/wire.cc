#include "agvisor/proto/wire.h"
