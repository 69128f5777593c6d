#pragma once
// Writing a binary token dataset (format "bin", odc/data/bin_dataset.h): PREFIX.bin + PREFIX.idx
// from any TokenDataset, published atomically.
#include <string>

#include "odc/data/dataset.h"

namespace odc::data {

// Writes `source` as PREFIX.bin + PREFIX.idx (version 2), creating PREFIX's directory if need be.
// Both are written to ".tmp" files and synced first;
// then any old PREFIX.idx is removed, PREFIX.bin is renamed into place and PREFIX.idx last, so a
// crash at any point leaves either the old pair, the new pair, or a .bin without an .idx (which
// fails to open) -- never a valid-looking index over the wrong tokens.
void write_bin_dataset(const std::string& prefix, const TokenDataset& source);

}  // namespace odc::data
