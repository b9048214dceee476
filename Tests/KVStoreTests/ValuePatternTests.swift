import KVStore
import Testing

@Suite("A schema's patterns: whole-string matches in linear time")
struct ValuePatternTests {
    private func matches(_ pattern: String, _ text: String) throws -> Bool {
        try ValuePattern(regularExpression: pattern).matches(text)
    }

    /// The reason a pattern is refused, or nil when it is taken.
    private func refusal(_ pattern: String) -> String? {
        do {
            _ = try ValuePattern(regularExpression: pattern)
            return nil
        } catch {
            return error.description
        }
    }

    @Test("the whole string must match, with or without ^ and $")
    func wholeString() throws {
        #expect(try matches("[a-z]+", "host"))
        #expect(try !matches("[a-z]+", "host1"))
        #expect(try !matches("[a-z]+", ""))
        #expect(try matches("^[a-z]+$", "host"))
        #expect(try !matches("^[a-z]+$", "host name"))
        #expect(try matches("a\\$", "a$"))
        #expect(try matches("", ""))
        #expect(try !matches("", "a"))
    }

    @Test("classes, escapes, groups, alternation and counted repetition")
    func syntax() throws {
        #expect(try matches("[a-z0-9.-]{1,63}(\\.[a-z0-9-]{1,63})*", "db-1.example.org"))
        #expect(try matches("\\d{1,3}(\\.\\d{1,3}){3}", "10.0.0.1"))
        #expect(try !matches("\\d{1,3}(\\.\\d{1,3}){3}", "10.0.0"))
        #expect(try matches("(?:fast|safe|slow)", "safe"))
        #expect(try !matches("fast|safe", "fastsafe"))
        #expect(try matches("[^\\s]+", "x=y"))
        #expect(try !matches("[^\\s]+", "x y"))
        #expect(try matches("\\w+@\\w+", "me@host"))
        #expect(try matches("a{2,}", "aaaa"))
        #expect(try !matches("a{2,}", "a"))
        #expect(try matches("a{3}", "aaa"))
        #expect(try !matches("a{3}", "aaaa"))
        #expect(try matches("x*?y", "xxy"))
        #expect(try matches(".", "é"))
        #expect(try !matches(".", "\n"))
        #expect(try matches("[]a]+", "]a]"))
        #expect(try matches("[a-]+", "a-a"))
        #expect(try matches("café", "café"))
    }

    @Test("what would backtrack or is past a bound is refused with a reason")
    func refusals() {
        #expect(refusal("(a)\\1")?.contains("backreferences") == true)
        #expect(refusal("(?=a)a")?.contains("lookaround") == true)
        #expect(refusal("\\bword")?.contains("word boundaries") == true)
        #expect(refusal("a**")?.contains("repeats a repetition") == true)
        #expect(refusal("a++")?.contains("repeats a repetition") == true)
        #expect(refusal("*a")?.contains("nothing to repeat") == true)
        #expect(refusal("(ab")?.contains("never closed") == true)
        #expect(refusal("ab)")?.contains("unmatched ')'") == true)
        #expect(refusal("[ab")?.contains("never closed") == true)
        #expect(refusal("a{3,1}")?.contains("counts down") == true)
        #expect(refusal("a{1001}")?.contains("above 1000") == true)
        #expect(refusal("a{x}")?.contains("{n}, {n,} or {n,m}") == true)
        #expect(refusal("a^b")?.contains("very start") == true)
        #expect(refusal("(a{1000}){1000}")?.contains("expands past 2000") == true)
        #expect(refusal(String(repeating: "(", count: 40) + "a" + String(repeating: ")", count: 40))?.contains("nest deeper") == true)
        #expect(refusal(String(repeating: "a", count: 1025))?.contains("longer than 1024 bytes") == true)
        #expect(refusal("[z-a]")?.contains("counts down") == true)
        #expect(refusal("\\")?.contains("lone backslash") == true)
        #expect(refusal("\\q")?.contains("not supported") == true)
    }

    /// The patterns that take exponential time in a backtracking matcher stay within the bound
    /// stated on `ValuePattern`: (characters + 1) × program length visits, counted, not timed.
    @Test("pathological patterns stay within their bound", arguments: ["(a+)+b", "(a|a)*b", "(a|aa)*c", "(a*)*b", "(.*a){20}"])
    func pathological(pattern: String) throws {
        let compiled = try ValuePattern(regularExpression: pattern)
        let text = String(repeating: "a", count: 100_000)
        let (matched, steps) = compiled.run(text.unicodeScalars)
        #expect(!matched || pattern == "(.*a){20}")
        #expect(steps <= (text.unicodeScalars.count + 1) * compiled.programLength)
    }

    @Test("a key pattern is a glob: * any run, ? one character, backslash takes the next as it is")
    func globs() throws {
        #expect(try ValuePattern(glob: "feature.*").matches("feature.dark.mode"))
        #expect(try !ValuePattern(glob: "feature.*").matches("features"))
        #expect(try ValuePattern(glob: "log?").matches("log1"))
        #expect(try !ValuePattern(glob: "log?").matches("log12"))
        #expect(try ValuePattern(glob: "a\\*").matches("a*"))
        #expect(try !ValuePattern(glob: "a\\*").matches("ab"))
        #expect(try ValuePattern(glob: "[x]").matches("[x]"))
        #expect(try ValuePattern(glob: "*").matches(""))
    }
}
