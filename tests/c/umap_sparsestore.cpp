/* A C++ program written for UMap's Umap::SparseStore, as UMap's
   umap-sparsestore test uses it: a region of 32 MiB over a directory of
   2 MiB files made (create mode), written in a few places only, under a
   cache of 2 MiB, unmapped, its files closed; then opened again (open
   mode, read-only) and read back. Only the files written exist, each
   2 MiB; bytes never written read as zeros. */
#include <umap/umap.h>
#include <umap/store/SparseStore.h>

#include <dirent.h>

#include <exception>
#include <set>
#include <string>

#include "check.h"

static const uint64_t region_size = 32ull << 20;
static const size_t granularity = 2u << 20;

/* The word written at index i of the region (never 0). */
static uint64_t word(uint64_t i) { return (region_size / 8 - i) * 0x9E3779B97F4A7C15ull | 1; }

/* Whether word i was written: all of files 0, 3 and 15, and one word in
   file 7. */
static bool written(uint64_t i) {
  uint64_t file = i * 8 / granularity;
  return file == 0 || file == 3 || file == 15 || i * 8 == 7 * granularity + 12345 * 8;
}

static std::set<std::string> entries(const std::string& dir) {
  std::set<std::string> names;
  DIR* d = opendir(dir.c_str());
  CHECK(d != NULL);
  for (struct dirent* e; (e = readdir(d)) != NULL;)
    if (e->d_name[0] != '.') names.insert(e->d_name);
  closedir(d);
  return names;
}

int main() {
  const char* tmp = getenv("TMPDIR");
  std::string root = std::string(tmp && *tmp ? tmp : "/tmp") + "/sparsestore";
  const unsigned long page_size = umapcfg_get_umap_page_size();

  {
    Umap::SparseStore* store = new Umap::SparseStore(region_size, page_size, root, granularity);
    CHECK(store->get_current_capacity() == region_size);
    void* region = umap_ex(NULL, region_size, PROT_READ | PROT_WRITE, UMAP_PRIVATE, -1, 0, store);
    CHECK(region != UMAP_FAILED);
    uint64_t* arr = (uint64_t*)region;
    for (uint64_t i = 0; i < region_size / 8; i++)
      if (written(i)) arr[i] = word(i);
    /* Read back through the cache, with pages evicted and read again. */
    for (uint64_t i = 0; i < region_size / 8; i += 61) CHECK(arr[i] == (written(i) ? word(i) : 0));
    CHECK(uunmap(region, region_size) == 0);
    CHECK(store->close_files() == 0);
    delete store;
  }

  std::set<std::string> expect = {"_metadata", "0", "3", "7", "15"};
  CHECK(entries(root) == expect);
  for (const char* name : {"0", "3", "7", "15"}) {
    struct stat st;
    CHECK(stat((root + "/" + name).c_str(), &st) == 0);
    CHECK((size_t)st.st_size == granularity);
  }
  CHECK(Umap::SparseStore::get_capacity(root) == region_size);

  /* Create mode refuses a directory that exists, as UMap's does (it throws). */
  bool refused = false;
  try {
    Umap::SparseStore again(region_size, page_size, root, granularity);
  } catch (const std::exception& e) {
    refused = strstr(e.what(), root.c_str()) != NULL;
  }
  CHECK(refused);

  {
    Umap::SparseStore* store = new Umap::SparseStore(root, true);
    CHECK(store->get_current_capacity() == region_size);
    void* region = umap_ex(NULL, region_size, PROT_READ, UMAP_PRIVATE, -1, 0, store);
    CHECK(region != UMAP_FAILED);
    const uint64_t* arr = (const uint64_t*)region;
    uint64_t nonzero = 0;
    for (uint64_t i = 0; i < region_size / 8; i++) {
      CHECK(arr[i] == (written(i) ? word(i) : 0));
      nonzero += arr[i] != 0;
    }
    CHECK(nonzero == 3 * granularity / 8 + 1);
    CHECK(uunmap(region, region_size) == 0);
    CHECK(store->close_files() == 0);
    delete store;
  }
  /* Reading made no file. */
  CHECK(entries(root) == expect);

  printf("umap_sparsestore: ok (%zu files of %zu written)\n", expect.size() - 1,
         (size_t)(region_size / granularity));
  return 0;
}
