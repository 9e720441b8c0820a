#include "search/tuning_cache.h"
