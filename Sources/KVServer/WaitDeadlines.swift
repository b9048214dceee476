import HeapModule

/// The deadlines of the long polls' waits, soonest first (swift-collections' `Heap`). A wait
/// that ends before its deadline leaves its entry behind, to be dropped when it comes up or
/// when the heap is compacted (`keep`): entries cost no timer each.
struct WaitDeadlines<ID: Hashable> {
    struct Entry: Comparable {
        let deadline: Duration
        let store: String
        let id: ID

        static func < (left: Entry, right: Entry) -> Bool { left.deadline < right.deadline }
    }

    private var heap = Heap<Entry>()

    var soonest: Duration? { heap.min?.deadline }
    var count: Int { heap.count }

    mutating func insert(_ entry: Entry) {
        heap.insert(entry)
    }

    /// Removes and returns every entry whose deadline is at or before `now`.
    mutating func popExpired(at now: Duration) -> [Entry] {
        var expired: [Entry] = []
        while let first = heap.min, first.deadline <= now {
            expired.append(heap.removeMin())
        }
        return expired
    }

    mutating func removeAll() { heap = Heap() }

    /// Keeps only the entries `isLive` says still wait, in a heap of their own size.
    mutating func keep(where isLive: (Entry) -> Bool) {
        heap = Heap(heap.unordered.filter(isLive))
    }
}
