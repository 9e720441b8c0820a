// BEAM search over lower/opts.h (not written yet).
#pragma once
