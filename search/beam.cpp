#include "search/beam.h"
