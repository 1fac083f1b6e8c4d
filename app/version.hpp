#pragma once
namespace troupe {
const char* version();
}
