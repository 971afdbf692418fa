// Where the data sets that tools/setup.sh makes live, for programs that read them without being
// told: $LOOM_DATA_DIR when it is set and not empty (setup.sh's own variable), else the data/
// folder of the loom checkout that holds this libloom.so: the first folder above the library
// with a tools/setup.sh in it (<checkout>/build/libloom.so -> <checkout>/data). The Python tests
// and scripts find the digits the same way (LOOM_DATA_DIR, else <checkout>/data).
#pragma once

#include <string>

namespace loom {
namespace io {

// IOError when LOOM_DATA_DIR is unset and the library lies outside a checkout (an installed
// wheel): the message says to set LOOM_DATA_DIR.
std::string DefaultDataDir();

}  // namespace io
}  // namespace loom
