// cu_pointer_chase.cu - kernels that chase pointers stored in device memory: 16 Mi nodes of 64
// bytes spread over 128 separate 8 MiB allocations, linked into 4096 lists of 4096 nodes in a
// seeded random order, so every list wanders through every allocation. A kernel's arguments name
// only the table of list heads and an output array; the nodes it reads and writes are reached
// through `next` pointers in device memory, which no launch-argument predictor can see. walk
// reads and updates every node of its list, reverse relinks each list in place on the device
// (pointers written by the GPU), walk runs again over the reversed lists. About 1 GiB. The
// digest covers every node, its `next` pointer translated to (allocation, offset) so runs with
// different addresses compare equal.
#include "compat_cu.h"

#include <algorithm>
#include <vector>

struct Node {
    Node *next;
    uint32_t id;
    float val;
    float payload[12];
};
static_assert(sizeof(Node) == 64, "node size");

__global__ void walk(Node *const *heads, int lists, float *out)
{
    int l = blockIdx.x * blockDim.x + threadIdx.x;
    if (l >= lists)
        return;
    float acc = 0.0f;
    int step = 0;
    for (Node *p = heads[l]; p != nullptr; p = p->next, step++) {
        acc = acc * 0.999f + p->val * (float)((step % 7) + 1);
        p->payload[step % 12] += acc * 1e-3f;
        p->val = 0.5f * p->val + 0.25f;
    }
    out[l] = acc;
}

__global__ void reverse(Node **heads, int lists)
{
    int l = blockIdx.x * blockDim.x + threadIdx.x;
    if (l >= lists)
        return;
    Node *prev = nullptr, *cur = heads[l];
    while (cur != nullptr) {
        Node *nxt = cur->next;
        cur->next = prev;
        prev = cur;
        cur = nxt;
    }
    heads[l] = prev;
}

int main()
{
    const int chunks = 128;
    const size_t chunk_bytes = 8ull << 20;
    const size_t per_chunk = chunk_bytes / sizeof(Node);
    const size_t total = per_chunk * chunks;
    const int lists = 4096;
    const size_t len = total / lists;

    std::vector<char *> base(chunks);
    for (int c = 0; c < chunks; c++)
        base[c] = dev_alloc<char>(chunk_bytes);
    Node **heads = dev_alloc<Node *>(lists * sizeof(Node *));
    float *out1 = dev_alloc<float>(lists * sizeof(float));
    float *out2 = dev_alloc<float>(lists * sizeof(float));
    auto addr = [&](uint32_t g) { return reinterpret_cast<Node *>(base[g / per_chunk] + (g % per_chunk) * sizeof(Node)); };

    // a seeded permutation of all nodes (Fisher-Yates on a 64-bit LCG)
    std::vector<uint32_t> perm(total);
    for (size_t i = 0; i < total; i++)
        perm[i] = (uint32_t)i;
    uint64_t x = 0x853c49e6748fea9bULL;
    for (size_t i = total - 1; i > 0; i--) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        size_t j = (x >> 16) % (i + 1);
        std::swap(perm[i], perm[j]);
    }
    std::vector<uint32_t> succ(total); // global index of the next node, or UINT32_MAX
    std::vector<Node *> h_heads(lists);
    for (int l = 0; l < lists; l++) {
        for (size_t t = 0; t < len; t++) {
            uint32_t g = perm[l * len + t];
            succ[g] = t + 1 < len ? perm[l * len + t + 1] : UINT32_MAX;
        }
        h_heads[l] = addr(perm[l * len]);
    }
    std::vector<Node> h(per_chunk);
    for (int c = 0; c < chunks; c++) {
        for (size_t s = 0; s < per_chunk; s++) {
            uint32_t g = (uint32_t)(c * per_chunk + s);
            Node &nd = h[s];
            nd.next = succ[g] == UINT32_MAX ? nullptr : addr(succ[g]);
            nd.id = g;
            nd.val = hash_float(g, 5);
            for (int k = 0; k < 12; k++)
                nd.payload[k] = hash_float(g * 12ull + k, 6);
        }
        CK(cudaMemcpy(base[c], h.data(), chunk_bytes, cudaMemcpyHostToDevice));
    }
    CK(cudaMemcpy(heads, h_heads.data(), lists * sizeof(Node *), cudaMemcpyHostToDevice));

    walk<<<lists / 128, 128>>>(heads, lists, out1);
    reverse<<<lists / 128, 128>>>(heads, lists);
    walk<<<lists / 128, 128>>>(heads, lists, out2);
    CK(cudaDeviceSynchronize());
    CK(cudaGetLastError());

    // Translate device pointers to global node indices (UINT32_MAX for null).
    std::vector<std::pair<uintptr_t, int>> sorted(chunks);
    for (int c = 0; c < chunks; c++)
        sorted[c] = {reinterpret_cast<uintptr_t>(base[c]), c};
    std::sort(sorted.begin(), sorted.end());
    long long bad = 0;
    auto index_of = [&](const Node *p) -> uint64_t {
        if (p == nullptr)
            return UINT32_MAX;
        uintptr_t a = reinterpret_cast<uintptr_t>(p);
        auto it = std::upper_bound(sorted.begin(), sorted.end(), std::make_pair(a, chunks));
        if (it == sorted.begin()) {
            bad++;
            return ~0ull;
        }
        --it;
        uintptr_t off = a - it->first;
        if (off >= chunk_bytes || off % sizeof(Node) != 0) {
            bad++;
            return ~0ull;
        }
        return it->second * per_chunk + off / sizeof(Node);
    };
    Digest d;
    std::vector<float> o1(lists), o2(lists);
    CK(cudaMemcpy(o1.data(), out1, lists * sizeof(float), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(o2.data(), out2, lists * sizeof(float), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(h_heads.data(), heads, lists * sizeof(Node *), cudaMemcpyDeviceToHost));
    d.add(o1.data(), lists * sizeof(float));
    d.add(o2.data(), lists * sizeof(float));
    for (int l = 0; l < lists; l++)
        d.add_u64(index_of(h_heads[l]));
    for (int c = 0; c < chunks; c++) {
        CK(cudaMemcpy(h.data(), base[c], chunk_bytes, cudaMemcpyDeviceToHost));
        for (size_t s = 0; s < per_chunk; s++) {
            d.add_u64(index_of(h[s].next));
            d.add(&h[s].id, sizeof(Node) - sizeof(Node *));
        }
    }
    double s1 = 0, s2 = 0;
    for (int l = 0; l < lists; l++) {
        s1 += o1[l];
        s2 += o2[l];
    }
    double vals[3] = {s1, s2, (double)bad};
    finish("cu_pointer_chase", d, g_allocated, 3, vals, "chunks=%dx%zuMiB lists=%d len=%zu bad_pointers=%lld",
           chunks, chunk_bytes >> 20, lists, len, bad);
    return bad == 0 ? 0 : 1;
}
