#pragma once
// Emulated build only (tests/emu): stands in for the toolkit's cuda_bf16.h.
#include "../bf16_emu.h"
