/// A regular expression a schema gives for strings (and, written as a glob, for key names),
/// matched against the whole string in time linear in its length.
///
/// The pattern compiles to a small program for a Thompson automaton: matching keeps the set of
/// places the program can be at, and takes each character once, so no pattern backtracks.
/// A match visits each instruction at most once per character: it costs at most
/// (characters + 1) × `program.count` steps, and the program is at most
/// `Limits.instructions` long. The syntax is `PatternNode`'s.
public struct ValuePattern: Sendable, Equatable {
    /// The bounds a pattern is read within: what keeps the cost of reading it and of each
    /// match bounded.
    public enum Limits {
        /// The longest pattern, in bytes of UTF-8.
        public static let sourceBytes = 1024
        /// The most groups open inside one another.
        public static let groupDepth = 32
        /// The largest count in `{n,m}`.
        public static let repetitionCount = 1000
        /// The longest compiled program: what bounds a match's cost per character.
        public static let instructions = 2000
        /// The most `*` in a key pattern: each adds a place a match can be at, so they bound a
        /// key's match to a few steps per character.
        public static let globStars = 8
    }

    /// The pattern as the schema wrote it.
    public let source: String
    let program: [Instruction]
    /// How many instructions the pattern compiled to (at most `Limits.instructions`).
    package var programLength: Int { program.count }

    enum Instruction: Sendable, Equatable {
        /// Takes one character from the set and goes on to the next instruction.
        case scalars(ScalarSet)
        /// Goes on at both places.
        case split(Int, Int)
        case jump(Int)
        case match
    }

    /// Reads a regular expression (`PatternNode` gives the syntax).
    public init(regularExpression source: String) throws(StoreError) {
        try self.init(source: source, tree: try Self.parsed(source))
    }

    /// Reads a key pattern: a glob, in which `*` stands for any run of characters (dots
    /// included), `?` for any one, and a backslash takes the next character as it is.
    public init(glob source: String) throws(StoreError) {
        guard source.utf8.count <= KeyName.maximumBytes else {
            throw .invalidSchema("the key pattern \(source.prefix(40).debugDescription)… is longer than \(KeyName.maximumBytes) bytes")
        }
        var items = [PatternNode]()
        var escaped = false
        var stars = 0
        for scalar in source.unicodeScalars {
            if escaped {
                items.append(.scalars(.just(scalar)))
                escaped = false
                continue
            }
            switch scalar {
            case "\\": escaped = true
            case "*":
                stars += 1
                guard stars <= Limits.globStars else {
                    throw .invalidSchema("the key pattern \(source.prefix(80).debugDescription) has more than \(Limits.globStars) '*'")
                }
                items.append(.repeated(.scalars(.everything), least: 0, most: nil))
            case "?": items.append(.scalars(.everything))
            default: items.append(.scalars(.just(scalar)))
            }
        }
        if escaped { throw .invalidSchema("the key pattern \(source.debugDescription) ends in a lone backslash") }
        try self.init(source: source, tree: .sequence(items))
    }

    private static func parsed(_ source: String) throws(StoreError) -> PatternNode {
        guard source.utf8.count <= Limits.sourceBytes else {
            throw .invalidSchema("the pattern \(source.prefix(40).debugDescription)… is longer than \(Limits.sourceBytes) bytes")
        }
        return try PatternParser.parse(source)
    }

    private init(source: String, tree: PatternNode) throws(StoreError) {
        guard Self.length(of: tree) <= Limits.instructions - 1 else {
            throw .invalidSchema("the pattern \(source.prefix(80).debugDescription) expands past \(Limits.instructions) steps: repeat less")
        }
        var program = [Instruction]()
        Self.emit(tree, into: &program)
        program.append(.match)
        self.source = source
        self.program = program
    }

    /// Whether the whole of `text` matches.
    public func matches(_ text: String) -> Bool {
        run(text.unicodeScalars).matched
    }

    /// Whether some text that begins with `prefix` may match: false once no place in the
    /// program is left after it.
    public func mayMatch(after prefix: String) -> Bool {
        var run = AutomatonRun(program: program)
        var current = [Int](), next = [Int]()
        run.follow(from: 0, into: &current)
        for scalar in prefix.unicodeScalars {
            run.nextGeneration()
            next.removeAll(keepingCapacity: true)
            for place in current {
                if case .scalars(let set) = program[place], set.contains(scalar) { run.follow(from: place + 1, into: &next) }
            }
            swap(&current, &next)
            if current.isEmpty { return false }
        }
        return true
    }

    /// Runs the program over `text`: whether it matched, and how many instructions it visited
    /// (the bound on a match's cost is stated on this type).
    package func run(_ text: some Sequence<Unicode.Scalar>) -> (matched: Bool, steps: Int) {
        var run = AutomatonRun(program: program)
        var current = [Int](), next = [Int]()
        run.follow(from: 0, into: &current)
        for scalar in text {
            if current.isEmpty { break }
            run.nextGeneration()
            next.removeAll(keepingCapacity: true)
            for place in current {
                if case .scalars(let set) = program[place], set.contains(scalar) {
                    run.follow(from: place + 1, into: &next)
                }
            }
            swap(&current, &next)
            if current.isEmpty { return (false, run.steps) }
        }
        return (current.contains { program[$0] == .match }, run.steps)
    }

    /// The instructions `node` compiles to, counted without building them and capped just past
    /// the limit, so that `(a{1000}){1000}` is refused before it is built.
    private static func length(of node: PatternNode) -> Int {
        let cap = Limits.instructions
        switch node {
        case .empty: return 0
        case .scalars: return 1
        case .sequence(let items):
            return items.reduce(0) { min(cap, $0 + length(of: $1)) }
        case .alternatives(let branches):
            return min(cap, branches.reduce(0) { min(cap, $0 + length(of: $1)) } + 2 * (branches.count - 1))
        case .repeated(let inner, let least, let most):
            let body = length(of: inner)
            let required = least.multipliedReportingOverflow(by: body)
            let optional = most.map { ($0 - least).multipliedReportingOverflow(by: body + 1) } ?? (partialValue: body + 2, overflow: false)
            guard !required.overflow, !optional.overflow else { return cap }
            return min(cap, required.partialValue + optional.partialValue)
        }
    }

    private static func emit(_ node: PatternNode, into program: inout [Instruction]) {
        switch node {
        case .empty:
            break
        case .scalars(let set):
            program.append(.scalars(set))
        case .sequence(let items):
            for item in items { emit(item, into: &program) }
        case .alternatives(let branches):
            var jumps = [Int]()
            for branch in branches.dropLast() {
                let split = program.count
                program.append(.split(split + 1, split + 1))
                emit(branch, into: &program)
                jumps.append(program.count)
                program.append(.jump(0))
                program[split] = .split(split + 1, program.count)
            }
            if let last = branches.last { emit(last, into: &program) }
            for jump in jumps { program[jump] = .jump(program.count) }
        case .repeated(let inner, let least, let most):
            for _ in 0..<least { emit(inner, into: &program) }
            guard let most else {
                let loop = program.count
                program.append(.split(loop + 1, loop + 1))
                emit(inner, into: &program)
                program.append(.jump(loop))
                program[loop] = .split(loop + 1, program.count)
                return
            }
            var splits = [Int]()
            for _ in least..<most {
                splits.append(program.count)
                program.append(.split(program.count + 1, program.count + 1))
                emit(inner, into: &program)
            }
            for split in splits { program[split] = .split(split + 1, program.count) }
        }
    }
}

/// One match's bookkeeping: which instructions this character has visited.
private struct AutomatonRun {
    let program: [ValuePattern.Instruction]
    private var visited: [Int]
    private var generation = 0
    private var pending = [Int]()
    private(set) var steps = 0

    init(program: [ValuePattern.Instruction]) {
        self.program = program
        visited = Array(repeating: -1, count: program.count)
    }

    mutating func nextGeneration() { generation += 1 }

    /// Adds to `places` every instruction that takes a character (or matches) reachable from
    /// `start` without taking one; each is visited once per generation.
    mutating func follow(from start: Int, into places: inout [Int]) {
        pending.append(start)
        while let place = pending.popLast() {
            guard visited[place] != generation else { continue }
            visited[place] = generation
            steps += 1
            switch program[place] {
            case .jump(let target): pending.append(target)
            case .split(let first, let second): pending.append(second); pending.append(first)
            case .scalars, .match: places.append(place)
            }
        }
    }
}
