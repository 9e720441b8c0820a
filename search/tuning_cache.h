// The tuning cache: which opts won a search for a kernel on a device (not written yet).
#pragma once
