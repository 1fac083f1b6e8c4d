// A library that says which ABI it has but defines no entry point.
#include "actors/plugins/plugin_api.hpp"

TROUPE_PLUGIN_ABI()
