import Foundation
import KVStore
import Testing

@Suite("Key paths into a value, as plutil -extract takes them")
struct PropertyListKeyPathTests {
    let value = PropertyListValue.dictionary([
        "servers": .array([
            .dictionary(["host": .string("a"), "port": .integer(80)]),
            .dictionary(["host": .string("b"), "port": .integer(8080)]),
        ]),
        "volume": .integer(3),
        "": .string("the empty key"),
    ])

    /// The message a missing member gives, or nil when the path names one.
    private func missing(_ path: String) -> String? {
        do {
            _ = try value.member(at: PropertyListKeyPath(path))
            return nil
        } catch {
            return error.description
        }
    }

    @Test("dictionary keys and decimal array indexes, joined by dots")
    func members() throws {
        #expect(try value.member(at: PropertyListKeyPath("servers.1.port")) == .integer(8080))
        #expect(try value.member(at: PropertyListKeyPath("servers.0")) == .dictionary(["host": .string("a"), "port": .integer(80)]))
        #expect(try value.member(at: PropertyListKeyPath("volume")) == .integer(3))
        #expect(try value.member(at: PropertyListKeyPath("")) == .string("the empty key"))
        #expect(PropertyListKeyPath("servers.0.port").components == ["servers", "0", "port"])
    }

    @Test("a missing member names where the walk stopped and what was there", arguments: [
        ("servers.3", "no member at servers.3: servers is an array of 2 members"),
        ("servers.3.port", "no member at servers.3: servers is an array of 2 members"),
        ("servers.-1", "no member at servers.-1: servers is an array of 2 members"),
        ("servers.+1", "no member at servers.+1: servers is an array of 2 members"),
        ("servers.first", "no member at servers.first: servers is an array of 2 members"),
        ("servers.99999999999999999999", "no member at servers.99999999999999999999: servers is an array of 2 members"),
        ("servers.1.user", "no member at servers.1.user: servers.1 is a dictionary without the key \"user\""),
        ("port", "no member at port: the value is a dictionary without the key \"port\""),
        ("volume.0", "no member at volume.0: volume is an integer, which has no members"),
    ])
    func missingMembers(path: String, message: String) {
        #expect(missing(path) == message)
    }

    @Test("an array at the root is indexed directly; one member is not pluralised")
    func rootArray() throws {
        let list = PropertyListValue.array([.string("only")])
        #expect(try list.member(at: PropertyListKeyPath("0")) == .string("only"))
        #expect(throws: MissingMember.self) { try list.member(at: PropertyListKeyPath("1")) }
        do {
            _ = try list.member(at: PropertyListKeyPath("1"))
        } catch {
            #expect(error.description == "no member at 1: the value is an array of 1 member")
        }
    }
}
