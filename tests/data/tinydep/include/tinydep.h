/* tinydep: the dependency the CMake fixture fetches with FetchContent (served by the tests'
   git daemon). Its value must end up in the fixture's library. */
#pragma once
#define TINYDEP_VALUE 4242
#define TINYDEP_MARKER "tinydep value 4242"
