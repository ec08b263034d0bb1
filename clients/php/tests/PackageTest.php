<?php

declare(strict_types=1);

namespace Veil\Tests;

use Veil\Client;

/** The package releases on its own: its version is stated once, in three places that agree. */
final class PackageTest extends \PHPUnit\Framework\TestCase
{
    public function testComposerJsonClientVersionAndChangelogAgree(): void
    {
        $root = dirname(__DIR__);
        $composer = json_decode((string) file_get_contents($root . '/composer.json'), true, 16, JSON_THROW_ON_ERROR);
        $this->assertSame(Client::VERSION, $composer['version']);
        $changelog = (string) file_get_contents($root . '/CHANGELOG.md');
        $this->assertMatchesRegularExpression('/^## ' . preg_quote(Client::VERSION, '/') . ' /m', $changelog);
    }

    public function testThePackageShipsItsOwnLicenceAndAutoloadsItsNamespace(): void
    {
        $root = dirname(__DIR__);
        $composer = json_decode((string) file_get_contents($root . '/composer.json'), true, 16, JSON_THROW_ON_ERROR);
        $this->assertSame('veil/client', $composer['name']);
        $this->assertSame('Apache-2.0', $composer['license']);
        $this->assertSame(['Veil\\' => 'src/'], $composer['autoload']['psr-4']);
        $this->assertFileExists($root . '/LICENSE');
        $this->assertFileExists($root . '/README.md');
    }
}
