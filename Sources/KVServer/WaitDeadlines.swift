/// The deadlines of the long polls' waits, soonest first: a binary heap of (deadline, store,
/// waiter). A wait that ends before its deadline leaves its entry behind, to be dropped when it
/// comes up or when the heap is compacted (`keep`): entries cost no timer each.
struct WaitDeadlines<ID: Hashable> {
    struct Entry {
        let deadline: Duration
        let store: String
        let id: ID
    }

    private var heap: [Entry] = []

    var soonest: Duration? { heap.first?.deadline }
    var isEmpty: Bool { heap.isEmpty }
    var count: Int { heap.count }

    mutating func insert(_ entry: Entry) {
        heap.append(entry)
        var child = heap.count - 1
        while child > 0 {
            let parent = (child - 1) / 2
            guard heap[child].deadline < heap[parent].deadline else { break }
            heap.swapAt(child, parent)
            child = parent
        }
    }

    /// Removes and returns every entry whose deadline is at or before `now`.
    mutating func popExpired(at now: Duration) -> [Entry] {
        var expired: [Entry] = []
        while let first = heap.first, first.deadline <= now {
            expired.append(first)
            heap.swapAt(0, heap.count - 1)
            heap.removeLast()
            var parent = 0
            while true {
                let left = 2 * parent + 1, right = left + 1
                var smallest = parent
                if left < heap.count, heap[left].deadline < heap[smallest].deadline { smallest = left }
                if right < heap.count, heap[right].deadline < heap[smallest].deadline { smallest = right }
                guard smallest != parent else { break }
                heap.swapAt(parent, smallest)
                parent = smallest
            }
        }
        return expired
    }

    mutating func removeAll() { heap = [] }

    /// Keeps only the entries `isLive` says still wait, in a heap of their own size: a sorted
    /// array is a heap.
    mutating func keep(where isLive: (Entry) -> Bool) {
        heap = heap.filter(isLive).sorted { $0.deadline < $1.deadline }
    }
}
